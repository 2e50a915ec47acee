"""The notify() dispatcher: the one way the rest of Conveyor announces something.

In the caller's transaction, ``notify(topic, data, recipients=...)`` writes one in-app
``jobs.models.Notification`` per recipient and, when ``CONVEYOR_WEBHOOKS_ENABLED`` is true,
an ``Event`` plus one ``Delivery`` per endpoint subscribed to the topic:

* an enabled endpoint gets a ``pending`` delivery and one ``webhooks.deliver`` job, published
  to the broker when the transaction commits;
* an endpoint that Conveyor disabled (consecutive failures, 410 Gone) gets a ``skipped``
  delivery and no job, to be replayed once someone enables it again;
* an endpoint an operator disabled gets nothing.

With webhooks disabled, notify() writes no Event, Delivery or Job row at all.
"""

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs.models import Notification
from jobs.services import enqueue_many
from webhooks import conf
from webhooks.models import COLLECTS_SKIPPED, Delivery, DeliveryStatus, Endpoint, Event
from webhooks.topics import TOPICS, validate_topic

DELIVER_TASK = "webhooks.deliver"


def notify(topic: str, data: dict, *, recipients=None) -> Event | None:
    """Announce ``topic`` with ``data``: in-app notices for ``recipients``, webhooks for all.

    ``recipients`` are users or user ids. ``data["title"]``, when given, titles the in-app
    notice and ``data["message"]`` is its body. Returns the stored Event, or None when
    webhooks are disabled. Raises UnknownTopic (a ValueError) for a topic not in TOPICS,
    TypeError for data that is not JSON-serialisable.
    """
    validate_topic(topic)
    data = normalise(data)
    with transaction.atomic():
        _notify_in_app(topic, data, recipients)
        if not conf.get().enabled:
            return None
        event = event_create(topic, data)
        subscribed = [
            endpoint
            for endpoint in Endpoint.objects.filter(
                Q(enabled=True) | Q(disabled_by__in=COLLECTS_SKIPPED)
            )
            if topic in endpoint.topics
        ]
        deliveries_create(event, subscribed)
    return event


def normalise(data: dict) -> dict:
    """Return ``data`` as plain JSON types (datetimes, UUIDs, decimals become strings)."""
    if not isinstance(data, dict):
        raise TypeError("notify() data must be a dict")
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def _notify_in_app(topic: str, data: dict, recipients) -> None:
    ids = {getattr(recipient, "pk", recipient) for recipient in (recipients or [])}
    title = str(data.get("title") or TOPICS.get(topic, topic))[:300]
    body = str(data.get("message") or "")
    Notification.objects.bulk_create(
        Notification(recipient_id=user_id, topic=topic, title=title, body=body, data=data)
        for user_id in sorted(ids)
    )


def event_create(topic: str, data: dict) -> Event:
    """Store an event with the exact JSON body its deliveries will send."""
    now = timezone.now()
    event = Event(type=topic, created_at=now)
    event.body = json.dumps(
        {
            "id": event.message_id,
            "type": topic,
            "timestamp": now.isoformat().replace("+00:00", "Z"),
            "data": data,
        },
        separators=(",", ":"),
        cls=DjangoJSONEncoder,
    )
    event.save(force_insert=True)
    return event


def deliveries_create(event: Event, endpoints: list[Endpoint]) -> list[Delivery]:
    """Write one delivery per endpoint; enqueue a job for each one that is enabled."""
    now = timezone.now()
    deliveries = Delivery.objects.bulk_create(
        Delivery(
            event=event,
            endpoint=endpoint,
            status=DeliveryStatus.PENDING if endpoint.enabled else DeliveryStatus.SKIPPED,
            created_at=now,
            updated_at=now,
        )
        for endpoint in endpoints
    )
    pending = [d for d in deliveries if d.status == DeliveryStatus.PENDING]
    enqueue_deliveries(pending)
    return deliveries


def enqueue_deliveries(deliveries: list[Delivery]) -> None:
    """Enqueue one ``webhooks.deliver`` job per delivery and link each delivery to its job."""
    if not deliveries:
        return
    jobs = enqueue_many(
        DELIVER_TASK,
        [{"delivery_id": d.pk, "endpoint_id": d.endpoint_id} for d in deliveries],
        queue="webhooks",
        max_attempts=conf.get().max_attempts,
    )
    for delivery, job in zip(deliveries, jobs, strict=True):
        delivery.job = job
    Delivery.objects.bulk_update(deliveries, ["job"])
