"""Read-only queries: endpoints, deliveries and their attempts; the read of one attempt."""

import functools
from dataclasses import dataclass
from datetime import datetime

from django.db import connections
from django.db.models import Count, QuerySet

from webhooks.errors import DeliveryNotFound, EndpointNotFound, WebhookError
from webhooks.models import Delivery, DeliveryStatus, Endpoint


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


@dataclass(frozen=True)
class Outgoing:
    """What one attempt needs of a delivery, its event and its endpoint, read fresh."""

    delivery_id: int
    status: str
    endpoint_id: int
    enabled: bool
    url: str
    secret: str
    previous_secret: str
    previous_secret_expires_at: datetime | None
    message_id: str
    topic: str
    body: str


# Outgoing's fields after delivery_id, as lookups from Delivery, in the same order.
OUTGOING_COLUMNS = (
    "status",
    "endpoint_id",
    "endpoint__enabled",
    "endpoint__url",
    "endpoint__secret",
    "endpoint__previous_secret",
    "endpoint__previous_secret_expires_at",
    "event__message_id",
    "event__type",
    "event__body",
)


def outgoing_get(*, delivery_id: int, using: str = "default") -> Outgoing | None:
    """Return what an attempt of ``delivery_id`` needs (one SELECT), or None if it is gone."""
    sql, columns = _outgoing_query(using)
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(sql, [delivery_id])
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for index, column in enumerate(columns):  # what the ORM does per row (SQLite's datetimes)
        converters = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        for convert in converters:
            values[index] = convert(values[index], column, connection)
    return Outgoing(delivery_id, *values)


@functools.cache
def _outgoing_query(using: str) -> tuple[str, list]:
    """Compile the read of ``outgoing_get()`` once per database: (SQL, its column expressions).

    It runs once per delivery attempt, and compiling it took three times as long as running it.
    """
    query = Delivery.objects.filter(pk=0).values_list(*OUTGOING_COLUMNS).order_by().query
    compiler = query.get_compiler(using)
    sql, params = compiler.as_sql()
    if list(params) != [0]:  # the delivery id must be the statement's one parameter
        raise RuntimeError(f"unexpected parameters in the outgoing read: {params!r}")
    return sql, [column for column, _, _ in compiler.select]
