"""The webhooks services. Admin actions, the API, tasks and receivers all call these.

Every operator action writes an AuditLog row; every refusal is a ``webhooks.errors``
domain error, never a bare exception.
"""

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from jobs.models import FINISHED, AuditLog, Job
from jobs.services import job_cancel, job_supersede, notify_staff
from webhooks import conf, ssrf
from webhooks.dispatch import enqueue_deliveries, event_create
from webhooks.errors import (
    DeliveryConflict,
    DeliveryNotFound,
    EndpointNotFound,
    InvalidEndpoint,
    WebhookError,
)
from webhooks.models import Delivery, DeliveryStatus, DisabledBy, Endpoint
from webhooks.signing import generate_secret
from webhooks.topics import TEST_TOPIC, validate_topics
from webhooks.transitions import delivery_move

logger = logging.getLogger("webhooks")
S = DeliveryStatus
REPLAYABLE = (S.DEAD, S.SKIPPED, S.DELIVERED)
REPLAY_BATCH = 500
ENDPOINT_DISABLED_TOPIC = "webhook.endpoint_disabled"
UNSET = object()


def _audit(actor: str, action: str, target_type: str, target_id, **details) -> None:
    AuditLog.objects.create(
        actor=actor,
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        details=details,
    )


def _clean_url(url: str) -> str:
    url = (url or "").strip()
    if len(url) > Endpoint._meta.get_field("url").max_length:
        raise InvalidEndpoint("the URL is longer than 2000 characters")
    ssrf.check_for_save(url)
    return url


def _clean_description(description: str) -> str:
    description = (description or "").strip()
    if len(description) > Endpoint._meta.get_field("description").max_length:
        raise InvalidEndpoint("the description is longer than 300 characters")
    return description


def _locked_endpoint(endpoint_id: int) -> Endpoint:
    endpoint = Endpoint.objects.select_for_update().filter(pk=endpoint_id).first()
    if endpoint is None:
        raise EndpointNotFound(f"webhook endpoint {endpoint_id} does not exist")
    return endpoint


def endpoint_create(
    *, url: str, topics: list[str], description: str = "", actor: str = "system"
) -> Endpoint:
    """Create an enabled endpoint with a fresh secret; ``endpoint.secret`` is shown once.

    Raises UnsafeURL for a URL the SSRF guard refuses, UnknownTopic for an unknown topic.
    """
    endpoint = Endpoint(
        url=_clean_url(url),
        topics=validate_topics(topics),
        description=_clean_description(description),
        secret=generate_secret(),
    )
    with transaction.atomic():
        endpoint.save(force_insert=True)
        _audit(actor, "webhook.endpoint_create", "webhook_endpoint", endpoint.pk, url=endpoint.url)
    return endpoint


def endpoint_update(
    *,
    endpoint_id: int,
    actor: str,
    url: str = UNSET,
    topics: list[str] = UNSET,
    description: str = UNSET,
    enabled: bool = UNSET,
) -> Endpoint:
    """Change the given fields of an endpoint (PATCH semantics); enabling goes through enable."""
    changes = {}
    if url is not UNSET:
        changes["url"] = _clean_url(url)
    if topics is not UNSET:
        changes["topics"] = validate_topics(topics)
    if description is not UNSET:
        changes["description"] = _clean_description(description)
    with transaction.atomic():
        endpoint = _locked_endpoint(endpoint_id)
        for field, value in changes.items():
            setattr(endpoint, field, value)
        if changes:
            endpoint.save(update_fields=[*changes, "updated_at"])
            _audit(
                actor, "webhook.endpoint_update", "webhook_endpoint", endpoint.pk, fields=[*changes]
            )
        if enabled is not UNSET and bool(enabled) != endpoint.enabled:
            change = endpoint_enable if enabled else endpoint_disable
            endpoint = change(endpoint_id=endpoint.pk, actor=actor)
    return endpoint


def endpoint_enable(*, endpoint_id: int, actor: str) -> Endpoint:
    """Enable an endpoint and reset its failure count; replay what it missed separately."""
    with transaction.atomic():
        endpoint = _locked_endpoint(endpoint_id)
        was = {"disabled_by": endpoint.disabled_by, "reason": endpoint.disabled_reason}
        endpoint.enabled = True
        endpoint.disabled_by = endpoint.disabled_reason = ""
        endpoint.disabled_at = None
        endpoint.consecutive_dead = 0
        endpoint.save()
        _audit(actor, "webhook.endpoint_enable", "webhook_endpoint", endpoint.pk, **was)
    return endpoint


def endpoint_disable(*, endpoint_id: int, actor: str, reason: str = "") -> Endpoint:
    """Disable an endpoint by hand: no deliveries, and no skipped ones stored, until enabled."""
    with transaction.atomic():
        endpoint = _locked_endpoint(endpoint_id)
        endpoint.enabled = False
        endpoint.disabled_by = DisabledBy.MANUAL
        endpoint.disabled_reason = reason or f"disabled by {actor}"
        endpoint.disabled_at = timezone.now()
        endpoint.save()
        _audit(actor, "webhook.endpoint_disable", "webhook_endpoint", endpoint.pk, reason=reason)
    return endpoint


def endpoint_disable_automatically(
    endpoint_id: int, *, by: DisabledBy, reason: str, condition: Q | None = None
) -> bool:
    """Disable an enabled endpoint on Conveyor's own decision and tell every staff user.

    One conditional UPDATE, so concurrent failures disable it (and notify) exactly once.
    Returns whether this call disabled it.
    """
    now = timezone.now()
    with transaction.atomic():
        moved = Endpoint.objects.filter(Q(pk=endpoint_id, enabled=True), condition or Q()).update(
            enabled=False, disabled_by=by, disabled_reason=reason, disabled_at=now, updated_at=now
        )
        if not moved:
            return False
        url = Endpoint.objects.values_list("url", flat=True).get(pk=endpoint_id)
        _audit("system", "webhook.endpoint_disable", "webhook_endpoint", endpoint_id, reason=reason)
        notify_staff(
            topic=ENDPOINT_DISABLED_TOPIC,
            title=f"Webhook endpoint {url} was disabled",
            body=f"{reason}. Events for it are kept as skipped deliveries: enable it, then "
            "replay them.",
            data={"endpoint_id": endpoint_id, "url": url, "disabled_by": str(by)},
        )
    logger.warning(
        "webhook.endpoint_disabled", extra={"endpoint_id": endpoint_id, "reason": reason}
    )
    return True


def endpoint_rotate_secret(*, endpoint_id: int, actor: str) -> Endpoint:
    """Give an endpoint a new secret; the old one keeps signing next to it for 24 hours."""
    with transaction.atomic():
        endpoint = _locked_endpoint(endpoint_id)
        endpoint.previous_secret = endpoint.secret
        endpoint.previous_secret_expires_at = timezone.now() + conf.SECRET_OVERLAP
        endpoint.secret = generate_secret()
        endpoint.save()
        _audit(actor, "webhook.endpoint_rotate_secret", "webhook_endpoint", endpoint.pk)
    return endpoint


def endpoint_send_test(*, endpoint_id: int, actor: str) -> Delivery:
    """Send a ``webhook.test`` event to this one endpoint (even a disabled one)."""
    if not conf.get().enabled:
        raise WebhookError("webhooks are disabled (CONVEYOR_WEBHOOKS_ENABLED=false)")
    with transaction.atomic():
        endpoint = _locked_endpoint(endpoint_id)
        event = event_create(
            TEST_TOPIC,
            {"endpoint_id": endpoint.pk, "message": f"Test event sent by {actor}."},
        )
        now = timezone.now()
        delivery = Delivery.objects.create(
            event=event, endpoint=endpoint, created_at=now, updated_at=now
        )
        enqueue_deliveries([delivery])
        _audit(
            actor, "webhook.endpoint_test", "webhook_endpoint", endpoint.pk, delivery=delivery.pk
        )
    return delivery


def endpoint_delete(*, endpoint_id: int, actor: str) -> None:
    """Delete an endpoint with its deliveries and attempts (its events stay)."""
    with transaction.atomic():
        endpoint = _locked_endpoint(endpoint_id)
        _audit(actor, "webhook.endpoint_delete", "webhook_endpoint", endpoint.pk, url=endpoint.url)
        endpoint.delete()


def delivery_replay(*, delivery_id: int, actor: str) -> Delivery:
    """Send a finished delivery again with a fresh job (same ``webhook-id``).

    The delivery's previous job, if dead, is superseded: no longer a dead letter.

    Raises DeliveryConflict while the delivery is still in flight or its endpoint is
    disabled.
    """
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(of=("self",))
            .select_related("endpoint", "job")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None:
            raise DeliveryNotFound(f"webhook delivery {delivery_id} does not exist")
        if not delivery.endpoint.enabled:
            raise DeliveryConflict(
                f"endpoint {delivery.endpoint_id} is disabled: enable it before replaying"
            )
        stuck = delivery.status == S.PENDING and (
            delivery.job is None or delivery.job.status in FINISHED
        )
        if delivery.status == S.PENDING and not stuck:
            raise DeliveryConflict(f"delivery {delivery_id} is still being delivered")
        if not stuck:
            delivery_move(Q(pk=delivery.pk), S.PENDING, from_=REPLAYABLE)
        Delivery.objects.filter(pk=delivery.pk).update(replays=F("replays") + 1, delivered_at=None)
        previous_job_id = delivery.job_id
        enqueue_deliveries([delivery])
        # The fresh job carries the delivery on: its dead job is no longer a dead letter.
        job_supersede([previous_job_id], actor=actor)
        _audit(actor, "webhook.delivery_replay", "webhook_delivery", delivery.pk)
    delivery.refresh_from_db()
    return delivery


def delivery_replay_since(
    *,
    endpoint_id: int,
    since: datetime,
    actor: str,
    statuses: tuple[str, ...] = (S.DEAD, S.SKIPPED),
) -> int:
    """Replay every dead or skipped delivery of an endpoint created at or after ``since``.

    Works in batches of 500, each one transaction; returns how many were replayed.
    """
    if not set(statuses) <= set(REPLAYABLE):
        raise DeliveryConflict(f"only {', '.join(REPLAYABLE)} deliveries can be replayed")
    endpoint = Endpoint.objects.filter(pk=endpoint_id).first()
    if endpoint is None:
        raise EndpointNotFound(f"webhook endpoint {endpoint_id} does not exist")
    if not endpoint.enabled:
        raise DeliveryConflict(f"endpoint {endpoint_id} is disabled: enable it before replaying")
    replayed = 0
    while True:
        with transaction.atomic():
            batch = list(
                Delivery.objects.select_for_update(skip_locked=True)
                .filter(endpoint_id=endpoint_id, status__in=statuses, created_at__gte=since)
                .order_by("created_at", "id")[:REPLAY_BATCH]
            )
            ids = [d.pk for d in batch]
            moved = delivery_move(Q(pk__in=ids), S.PENDING, from_=statuses)
            if moved != len(ids):  # cannot happen under the row locks; never enqueue twice
                raise DeliveryConflict("deliveries changed while being replayed; try again")
            Delivery.objects.filter(pk__in=ids).update(replays=F("replays") + 1)
            previous_job_ids = [d.job_id for d in batch]
            enqueue_deliveries(batch)
            job_supersede(previous_job_ids, actor=actor)
            replayed += len(ids)
        if len(ids) < REPLAY_BATCH:
            break
    with transaction.atomic():
        _audit(
            actor,
            "webhook.delivery_replay_since",
            "webhook_endpoint",
            endpoint_id,
            since=since.isoformat(),
            statuses=list(statuses),
            count=replayed,
        )
    return replayed


def delivery_cancel(*, delivery_id: int, job_id: int, actor: str) -> Job:
    """Cancel a delivery's job and end the delivery (``dead``, "cancelled by <actor>").

    The delivery ends only while ``job_id`` is still its job; a cancel of a running attempt
    stops nothing already on the wire, but no further attempt is made. Does not count toward
    disabling the endpoint. Raises DeliveryNotFound, or IllegalTransition for a finished job.
    """
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().filter(pk=delivery_id).first()
        if delivery is None:
            raise DeliveryNotFound(f"webhook delivery {delivery_id} does not exist")
        job = job_cancel(job_id, actor=actor)
        delivery_move(
            Q(pk=delivery.pk, job_id=job_id),
            S.DEAD,
            from_=[S.PENDING],
            last_error=f"cancelled by {actor}",
        )
        _audit(actor, "webhook.delivery_cancel", "webhook_delivery", delivery.pk, job=job_id)
    return job


def delivery_mark_dead(job: Job) -> bool:
    """Mark the delivery of a dead ``webhooks.deliver`` job dead; count it for auto-disable.

    Called by the ``job_dead`` receiver inside the transaction that buried the job. After
    ``CONVEYOR_WEBHOOK_DISABLE_AFTER`` consecutive dead deliveries the endpoint is disabled.
    """
    delivery_id = (job.payload or {}).get("delivery_id")
    delivery = Delivery.objects.select_related("event").filter(pk=delivery_id).first()
    if delivery is None:
        return False
    moved = delivery_move(
        Q(pk=delivery.pk, job_id=job.pk),
        S.DEAD,
        from_=[S.PENDING],
        last_error=job.last_error[:4000],
    )
    if not moved or delivery.event.type == TEST_TOPIC:
        return bool(moved)
    Endpoint.objects.filter(pk=delivery.endpoint_id).update(
        consecutive_dead=F("consecutive_dead") + 1
    )
    limit = conf.get().disable_after
    endpoint_disable_automatically(
        delivery.endpoint_id,
        by=DisabledBy.FAILURES,
        reason=f"{limit} consecutive deliveries failed (the last: {job.last_error[:200]})",
        condition=Q(consecutive_dead__gte=limit),
    )
    return True
