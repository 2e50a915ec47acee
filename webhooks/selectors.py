"""Read-only queries for the admin and the API: endpoints, deliveries and their attempts."""

from datetime import datetime

from django.db.models import Count, QuerySet

from webhooks.errors import DeliveryNotFound, EndpointNotFound, WebhookError
from webhooks.models import Delivery, DeliveryStatus, Endpoint, Event


def endpoint_list(*, enabled: bool | None = None, topic: str | None = None) -> list[Endpoint]:
    """Return endpoints by id, optionally only enabled/disabled ones or those with a topic."""
    queryset = Endpoint.objects.order_by("id")
    if enabled is not None:
        queryset = queryset.filter(enabled=enabled)
    endpoints = list(queryset)
    if topic is not None:  # topics is a JSON list: filtered here so SQLite works too
        endpoints = [endpoint for endpoint in endpoints if topic in endpoint.topics]
    return endpoints


def endpoint_get(*, endpoint_id: int) -> Endpoint:
    """Return one endpoint or raise EndpointNotFound."""
    endpoint = Endpoint.objects.filter(pk=endpoint_id).first()
    if endpoint is None:
        raise EndpointNotFound(f"webhook endpoint {endpoint_id} does not exist")
    return endpoint


def delivery_list(
    *,
    endpoint_id: int | None = None,
    status: str | None = None,
    event_type: str | None = None,
    since: datetime | None = None,
) -> QuerySet[Delivery]:
    """Return deliveries, newest first, with their event and endpoint and attempt count.

    Raises WebhookError for a status that does not exist. Callers slice the result.
    """
    queryset = (
        Delivery.objects.select_related("event", "endpoint")
        .annotate(attempt_count=Count("attempts"))
        .order_by("-created_at", "-id")
    )
    if endpoint_id is not None:
        queryset = queryset.filter(endpoint_id=endpoint_id)
    if status is not None:
        if status not in DeliveryStatus.values:
            raise WebhookError(
                f"unknown delivery status {status!r}; use one of {', '.join(DeliveryStatus.values)}"
            )
        queryset = queryset.filter(status=status)
    if event_type is not None:
        queryset = queryset.filter(event__type=event_type)
    if since is not None:
        queryset = queryset.filter(created_at__gte=since)
    return queryset


def delivery_get(*, delivery_id: int) -> Delivery:
    """Return one delivery with its event, endpoint and attempts, or raise DeliveryNotFound."""
    delivery = (
        Delivery.objects.select_related("event", "endpoint", "job")
        .prefetch_related("attempts")
        .filter(pk=delivery_id)
        .first()
    )
    if delivery is None:
        raise DeliveryNotFound(f"webhook delivery {delivery_id} does not exist")
    return delivery


def event_get(*, message_id: str) -> Event | None:
    """Return the event with public id ``message_id`` (``evt_…``), or None."""
    return Event.objects.filter(message_id=message_id).first()
