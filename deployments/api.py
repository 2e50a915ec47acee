"""REST endpoints for CI: trigger, read, list, retry and cancel deployments; tail their logs."""

import threading
import time
from datetime import datetime

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict

from deployments import recovery, selectors, services, timeline
from deployments.errors import DeploymentNotFound
from deployments.models import FINISHED, Deployment, DeploymentStatus, Project
from project.access.auth import acting_user, actor, require_scope
from project.access.idempotency import IdempotencyConflict, run_once, token_scoped
from project.access.models import ApiToken, TokenScope
from project.api_errors import ApiError
from project.pagination import DEFAULT_LIMIT, MAX_LIMIT, paginate

router = Router(tags=["deployments"])
MAX_WAIT_SECONDS = 30
POLL_INTERVAL = 0.5
MAX_LOG_BYTES = 1024 * 1024
# Half of a gunicorn worker's threads (scripts/Procfile: --threads 8) may long-poll at once.
MAX_WAITERS = 4
_waiters = threading.BoundedSemaphore(MAX_WAITERS)


class TriggerIn(Schema):
    model_config = ConfigDict(extra="forbid")

    ref: str = Field(..., min_length=1, max_length=255, description="branch, tag or commit")
    environment: str | None = Field(None, max_length=100)
    pipeline: str | None = Field(None, max_length=100)
    params: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    override_freeze: bool = Field(
        False, description="deploy even inside a freeze window (admin tokens only; audited)"
    )


class HealthOut(Schema):
    status: str = Field(..., description="watching, healthy or unhealthy")
    until: str | None = Field(None, description="the end of the watched window")
    evaluated_at: str | None = None
    reasons: list[str] = Field(default_factory=list, description="what tripped the gate")
    figures: dict | None = Field(
        None, description="{after, before, check}: events, failures, failure_rate, ..."
    )
    rollback: dict | None = Field(None, description="the automatic rollback, if one was tried")


class DeploymentOut(Schema):
    id: int
    project: str
    environment: str
    ref: str
    commit_sha: str | None
    status: DeploymentStatus
    failure_reason: str | None
    retry_of: int | None
    rollback_of: int | None = Field(
        None, description="the earlier deployment whose commit this rollback deploys again"
    )
    undoes: int | None = Field(
        None, description="a rollback: the deployment that was current when it was made"
    )
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    pipeline: str
    params: dict
    triggered_by: str
    triggered_by_user: str | None = Field(
        None, description="the person behind it (a console user or the token's user)"
    )
    duration_seconds: float | None = None
    health: HealthOut | None = Field(
        None, description="the health gate's verdict after a success (null: no gate)"
    )
    waiting_for: str | None = Field(
        None,
        description="what a pending deployment waits for before it can run, e.g. a live "
        "deployer host with its project's runs_on tags",
    )
    waiting_since: datetime | None = None


class LogsOut(Schema):
    text: str
    next_offset: int
    complete: bool


class ListFilters(Schema):
    status: DeploymentStatus | None = None
    environment: str | None = Field(None, max_length=100)
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    before: int | None = Field(None, ge=1)


class WaitQuery(Schema):
    wait: float = Field(
        0, ge=0, le=MAX_WAIT_SECONDS, description="long-poll up to this many seconds"
    )


class LogsQuery(WaitQuery):
    offset: int = Field(0, ge=0)
    limit: int = Field(MAX_LOG_BYTES, ge=1, le=MAX_LOG_BYTES)
    ansi: bool = Field(
        False,
        description="keep terminal escape sequences (colours, cursor moves) as the step "
        "printed them; by default they are stripped",
    )


def _visible_projects(token: ApiToken):
    projects = Project.objects.all()
    if not token.allows(TokenScope.ADMIN):
        projects = projects.filter(api_tokens=token)
    return projects


def _not_found(kind: str, key: object) -> ApiError:
    """The one answer for "does not exist" and "exists but not for you": they must not differ."""
    return ApiError(404, "not_found", f"no {kind} {key!r}")


def visible_project(request: HttpRequest, slug: str) -> Project:
    """Return the project if this token may see it; 404 otherwise (never reveal it exists)."""
    found = _visible_projects(request.auth).filter(slug=slug).first()
    if found is None:
        raise _not_found("project", slug)
    return found


def visible_deployment(request: HttpRequest, deployment_id: int) -> Deployment:
    """Return the deployment if this token may see its project; the same 404 otherwise."""
    try:
        deployment = selectors.deployment_get(deployment_id=deployment_id)
    except DeploymentNotFound:
        raise _not_found("deployment", deployment_id) from None
    if not _visible_projects(request.auth).filter(pk=deployment.project_id).exists():
        raise _not_found("deployment", deployment_id)
    return deployment


def require_override(request: HttpRequest, override_freeze: bool) -> None:
    """Answer 403 when a token below admin scope asks to override a freeze."""
    if override_freeze and not request.auth.allows(TokenScope.ADMIN):
        raise ApiError(403, "forbidden", "only an admin-scope token may pass override_freeze")


def as_json(deployment: Deployment) -> dict:
    return DeploymentOut.model_validate(selectors.deployment_as_dict(deployment)).model_dump(
        mode="json"
    )


@router.post(
    "/projects/{slug}/deployments",
    response={201: DeploymentOut},
    summary="Trigger a deployment (send an Idempotency-Key to make retries safe)",
)
def trigger(request: HttpRequest, response: HttpResponse, slug: str, payload: TriggerIn):
    require_scope(request, TokenScope.DEPLOY, action="deployment.trigger")
    require_override(request, payload.override_freeze)
    project = visible_project(request, slug)

    def create(key: str | None) -> Deployment:
        return services.deployment_create(
            project=project,
            ref=payload.ref,
            environment=payload.environment,
            pipeline=payload.pipeline,
            params=payload.params,
            triggered_by=actor(request),
            triggered_by_user=acting_user(request),
            idempotency_key=key,
            override_freeze=payload.override_freeze,
        )

    return create_once(request, response, create)


def create_once(request: HttpRequest, response: HttpResponse, create) -> Status:
    """Answer 201 with the deployment ``create(key)`` makes, once per ``Idempotency-Key``.

    A replay of the same key and body answers the stored response (``Idempotent-Replayed``).
    """
    key = request.headers.get("Idempotency-Key")

    def handler() -> tuple[int, dict]:
        # Keys are the token's own (project.access.idempotency), down to the one stored on the row.
        return 201, as_json(create(token_scoped(request.auth, key)))

    if key is None:
        status, body = handler()
    else:
        try:
            status, body, replayed = run_once(
                token=request.auth, key=key, path=request.path, body=request.body, handler=handler
            )
        except IdempotencyConflict as exc:
            raise ApiError(exc.status, "idempotency_conflict", str(exc)) from None
        if replayed:
            response["Idempotent-Replayed"] = "true"
    response["Location"] = f"/api/v1/deployments/{body['id']}"
    return Status(status, body)


@router.get(
    "/projects/{slug}/deployments",
    response=list[DeploymentOut],
    summary="List a project's deployments",
)
def list_deployments(
    request: HttpRequest, response: HttpResponse, slug: str, filters: Query[ListFilters]
):
    require_scope(request, TokenScope.READ)
    project = visible_project(request, slug)
    deployments = Deployment.objects.select_related("project", "triggered_by_user").filter(
        project=project
    )
    if filters.status:
        deployments = deployments.filter(status=filters.status)
    if filters.environment:
        deployments = deployments.filter(environment=filters.environment)
    rows = paginate(request, response, deployments, limit=filters.limit, before=filters.before)
    return [selectors.deployment_as_dict(d) for d in rows]


def _wait_for(check, seconds: float):
    """Call ``check`` until it returns something truthy or ``seconds`` pass; return the last.

    At most ``MAX_WAITERS`` requests per process wait at once, so long-polling CI clients can
    never hold every web thread: past that, the answer comes at once (clients poll again).
    """
    if not _waiters.acquire(blocking=False):
        return check()
    try:
        deadline = time.monotonic() + seconds
        while True:
            value = check()
            if value or time.monotonic() >= deadline:
                return value
            time.sleep(POLL_INTERVAL)
    finally:
        _waiters.release()


@router.get(
    "/deployments/{int:deployment_id}",
    response=DeploymentOut,
    summary="One deployment; with wait=N, hold until it finishes or N seconds pass",
)
def get_deployment(request: HttpRequest, deployment_id: int, query: Query[WaitQuery]):
    require_scope(request, TokenScope.READ)
    deployment = visible_deployment(request, deployment_id)
    if query.wait and deployment.status not in FINISHED:
        _wait_for(
            lambda: Deployment.objects.filter(pk=deployment.pk, status__in=FINISHED).exists(),
            query.wait,
        )
        deployment = selectors.deployment_get(deployment_id=deployment_id)
    return selectors.deployment_as_dict(deployment)


@router.get(
    "/deployments/{int:deployment_id}/logs",
    response=LogsOut,
    summary="Log text from byte offset; with wait=N, hold until there is more or N seconds pass",
)
def get_logs(request: HttpRequest, deployment_id: int, query: Query[LogsQuery]):
    require_scope(request, TokenScope.READ)
    deployment = visible_deployment(request, deployment_id)

    def read():
        chunk = selectors.deployment_logs(
            deployment=deployment, offset=query.offset, limit_bytes=query.limit, ansi=query.ansi
        )
        moved = chunk["next_offset"] > query.offset  # e.g. past escapes stripped to ""
        return chunk if chunk["text"] or chunk["complete"] or moved else None

    found = _wait_for(read, query.wait) if query.wait else read()
    return found or selectors.deployment_logs(
        deployment=deployment, offset=query.offset, limit_bytes=query.limit, ansi=query.ansi
    )


class TimelineEntryOut(Schema):
    """One event; besides these, each kind has its fields (worker, step, status_code, ...)."""

    at: datetime
    kind: str
    summary: str

    model_config = ConfigDict(extra="allow")


class TimelineOut(Schema):
    events: list[TimelineEntryOut]


@router.get(
    "/deployments/{int:deployment_id}/timeline",
    response=TimelineOut,
    summary="Every event of a deployment in time order, with its webhook deliveries",
)
def get_timeline(request: HttpRequest, deployment_id: int):
    token = require_scope(request, TokenScope.READ)
    deployment = visible_deployment(request, deployment_id)
    # Webhook URLs only for a token that may read the webhooks API itself (admin scope).
    events = timeline.deployment_timeline(
        deployment, show_webhook_urls=token.allows(TokenScope.ADMIN)
    )
    # Returned as is: each kind carries its own fields beyond at/kind/summary, which the
    # schema (kept for the OpenAPI document) would drop.
    return JsonResponse({"events": events})


@router.post(
    "/deployments/{int:deployment_id}/retry",
    response={201: DeploymentOut},
    summary="Run a finished deployment again, as a new deployment linked by retry_of",
)
def retry(request: HttpRequest, response: HttpResponse, deployment_id: int):
    require_scope(request, TokenScope.DEPLOY, action="deployment.retry")
    visible_deployment(request, deployment_id)
    new = services.deployment_retry(
        deployment_id=deployment_id,
        triggered_by=actor(request),
        triggered_by_user=acting_user(request),
    )
    response["Location"] = f"/api/v1/deployments/{new.pk}"
    return Status(201, selectors.deployment_as_dict(new))


@router.post(
    "/deployments/{int:deployment_id}/cancel",
    response={202: DeploymentOut},
    summary="Cancel: a pending deployment at once, a running one after its steps stop",
)
def cancel(request: HttpRequest, deployment_id: int):
    require_scope(request, TokenScope.DEPLOY, action="deployment.cancel")
    visible_deployment(request, deployment_id)
    deployment = services.deployment_cancel(deployment_id=deployment_id, actor=actor(request))
    return Status(202, selectors.deployment_as_dict(deployment))


class RecoverIn(Schema):
    model_config = ConfigDict(extra="forbid")

    dry_run: bool = Field(
        ..., description="true: only count the failures; false: retry them in the background"
    )


class RecoveryOut(Schema):
    id: int | None = Field(None, description="the recovery (null for a dry run)")
    deployment_id: int
    dry_run: bool
    status: str = Field(..., description="counted (dry run), queued, running or done")
    since: datetime
    until: datetime
    successor: int | None = Field(None, description="the next successful deployment, if any")
    jobs: int
    deliveries: int
    done: int = 0
    failed: int = 0
    errors: list[str] = Field(default_factory=list)
    job_id: int | None = None


@router.post(
    "/deployments/{int:deployment_id}/recover",
    response={200: RecoveryOut, 202: RecoveryOut},
    summary="Retry the project's dead jobs and deliveries between this deployment and the next",
)
def recover(request: HttpRequest, deployment_id: int, payload: RecoverIn):
    require_scope(request, TokenScope.DEPLOY, action="deployment.recover")
    deployment = visible_deployment(request, deployment_id)
    user = acting_user(request)
    if payload.dry_run:
        counted = recovery.recovery_count(deployment)
        return Status(200, {**counted, "dry_run": True, "status": "counted"})
    made = recovery.recovery_create(deployment, actor=actor(request), user=user)
    return Status(202, {**recovery.recovery_as_dict(made), "dry_run": False})


class RecoveryListOut(Schema):
    recoveries: list[RecoveryOut]


@router.get(
    "/deployments/{int:deployment_id}/recoveries",
    response=RecoveryListOut,
    summary="The recoveries of a deployment's failures, newest first, with their progress",
)
def list_recoveries(request: HttpRequest, deployment_id: int):
    require_scope(request, TokenScope.READ)
    deployment = visible_deployment(request, deployment_id)
    found = deployment.recoveries.order_by("-pk")[: recovery.MAX_LISTED]
    return {"recoveries": [{**recovery.recovery_as_dict(r), "dry_run": False} for r in found]}
