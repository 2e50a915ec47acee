"""REST endpoints for webhook endpoints and deliveries (admin scope)."""

from datetime import datetime

from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict

from project.access.auth import actor, require_scope
from project.access.models import TokenScope
from project.pagination import DEFAULT_LIMIT, MAX_LIMIT, paginate
from webhooks import selectors, services
from webhooks.models import DeliveryStatus

router = Router(tags=["webhooks"])


class EndpointIn(Schema):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., min_length=1, max_length=2000)
    topics: list[str] = Field(..., min_length=1, max_length=50)
    description: str = Field("", max_length=300)


class EndpointPatch(Schema):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, min_length=1, max_length=2000)
    topics: list[str] | None = Field(None, min_length=1, max_length=50)
    description: str | None = Field(None, max_length=300)
    enabled: bool | None = None


class EndpointOut(Schema):
    id: int
    url: str
    description: str
    topics: list[str]
    enabled: bool
    disabled_reason: str
    disabled_at: datetime | None
    consecutive_dead: int
    created_at: datetime
    updated_at: datetime


class EndpointWithSecret(EndpointOut):
    secret: str


class AttemptOut(Schema):
    number: int
    started_at: datetime
    status_code: int | None
    latency_ms: int | None
    response_body: str
    error: str
    outcome: str


class DeliveryOut(Schema):
    id: int
    endpoint: int = Field(..., alias="endpoint_id")
    event_id: str = Field(..., alias="event.message_id")
    type: str = Field(..., alias="event.type")
    status: DeliveryStatus
    job: int | None = Field(None, alias="job_id")
    replays: int
    last_status_code: int | None
    last_error: str
    last_attempt_at: datetime | None
    delivered_at: datetime | None
    created_at: datetime


class DeliveryDetail(DeliveryOut):
    attempts: list[AttemptOut]


class DeliveryFilters(Schema):
    endpoint: int | None = Field(None, ge=1)
    status: DeliveryStatus | None = None
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    before: int | None = Field(None, ge=1)


class ReplayIn(Schema):
    model_config = ConfigDict(extra="forbid")

    since: datetime
    statuses: list[DeliveryStatus] = Field(
        default_factory=lambda: [DeliveryStatus.DEAD, DeliveryStatus.SKIPPED]
    )


class ReplayOut(Schema):
    replayed: int


def _admin(request: HttpRequest, action: str) -> str:
    """Admin scope, and for a person's token that person's permission for ``action``."""
    require_scope(request, TokenScope.ADMIN, action=action)
    return actor(request)


@router.post(
    "/webhooks/endpoints",
    response={201: EndpointWithSecret},
    summary="Subscribe a URL to topics; the secret is returned only here and on rotation",
)
def create_endpoint(request: HttpRequest, payload: EndpointIn):
    endpoint = services.endpoint_create(
        url=payload.url,
        topics=payload.topics,
        description=payload.description,
        actor=_admin(request, "endpoint.create"),
    )
    return Status(201, endpoint)


@router.get("/webhooks/endpoints", response=list[EndpointOut], summary="List webhook endpoints")
def list_endpoints(request: HttpRequest):
    _admin(request, "endpoint.view")
    return selectors.endpoint_list()


@router.get(
    "/webhooks/endpoints/{int:endpoint_id}", response=EndpointOut, summary="One webhook endpoint"
)
def get_endpoint(request: HttpRequest, endpoint_id: int):
    _admin(request, "endpoint.view")
    return selectors.endpoint_get(endpoint_id=endpoint_id)


@router.patch(
    "/webhooks/endpoints/{int:endpoint_id}",
    response=EndpointOut,
    summary="Change the URL, topics, description, or enable/disable",
)
def update_endpoint(request: HttpRequest, endpoint_id: int, payload: EndpointPatch):
    changes = {k: v for k, v in payload.model_dump(exclude_unset=True).items() if v is not None}
    return services.endpoint_update(
        endpoint_id=endpoint_id, actor=_admin(request, "endpoint.operate"), **changes
    )


@router.delete(
    "/webhooks/endpoints/{int:endpoint_id}", response={204: None}, summary="Delete an endpoint"
)
def delete_endpoint(request: HttpRequest, endpoint_id: int):
    services.endpoint_delete(endpoint_id=endpoint_id, actor=_admin(request, "endpoint.delete"))
    return Status(204, None)


@router.post(
    "/webhooks/endpoints/{int:endpoint_id}/rotate-secret",
    response=EndpointWithSecret,
    summary="New secret; the previous one keeps signing alongside for 24 hours",
)
def rotate_secret(request: HttpRequest, endpoint_id: int):
    return services.endpoint_rotate_secret(
        endpoint_id=endpoint_id, actor=_admin(request, "endpoint.rotate")
    )


@router.post(
    "/webhooks/endpoints/{int:endpoint_id}/test",
    response={202: DeliveryOut},
    summary="Send a webhook.test event to this endpoint",
)
def send_test(request: HttpRequest, endpoint_id: int):
    delivery = services.endpoint_send_test(
        endpoint_id=endpoint_id, actor=_admin(request, "endpoint.test")
    )
    return Status(202, selectors.delivery_get(delivery_id=delivery.pk))


@router.post(
    "/webhooks/endpoints/{int:endpoint_id}/replay",
    response={202: ReplayOut},
    summary="Replay every dead/skipped delivery of this endpoint since a time",
)
def replay_since(request: HttpRequest, endpoint_id: int, payload: ReplayIn):
    count = services.delivery_replay_since(
        endpoint_id=endpoint_id,
        since=payload.since,
        statuses=tuple(payload.statuses),
        actor=_admin(request, "endpoint.replay"),
    )
    return Status(202, {"replayed": count})


@router.get("/webhooks/deliveries", response=list[DeliveryOut], summary="Deliveries, newest first")
def list_deliveries(request: HttpRequest, response: HttpResponse, filters: Query[DeliveryFilters]):
    _admin(request, "delivery.view")
    deliveries = selectors.delivery_list(endpoint_id=filters.endpoint, status=filters.status)
    return paginate(request, response, deliveries, limit=filters.limit, before=filters.before)


@router.get(
    "/webhooks/deliveries/{int:delivery_id}",
    response=DeliveryDetail,
    summary="One delivery with every HTTP attempt",
)
def get_delivery(request: HttpRequest, delivery_id: int):
    _admin(request, "delivery.view")
    return selectors.delivery_get(delivery_id=delivery_id)


@router.post(
    "/webhooks/deliveries/{int:delivery_id}/replay",
    response={202: DeliveryOut},
    summary="Send a finished delivery again (same webhook-id)",
)
def replay(request: HttpRequest, delivery_id: int):
    delivery = services.delivery_replay(
        delivery_id=delivery_id, actor=_admin(request, "delivery.replay")
    )
    return Status(202, selectors.delivery_get(delivery_id=delivery.pk))
