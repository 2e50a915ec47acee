"""REST endpoints for environments: history, rollback, approvals and DORA metrics."""

from datetime import datetime, timedelta

from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema
from pydantic import ConfigDict, StrictInt, StrictStr

from deployments import approvals, deploy_locks, dora, history, rollback, selectors
from deployments.api import (
    DeploymentOut,
    create_once,
    require_override,
    visible_deployment,
    visible_project,
)
from deployments.environments import Approver
from deployments.errors import InvalidRequest
from deployments.validation import clean_environment
from project.access.auth import acting_user, actor, require_scope
from project.access.models import ApiToken, TokenScope
from project.access.permissions import allowed
from project.env import parse_duration
from project.pagination import DEFAULT_LIMIT, MAX_LIMIT, paginate

router = Router(tags=["environments"])


class FrozenOut(Schema):
    window: str
    opened_at: datetime
    closes_at: datetime


class LockIn(Schema):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        ..., min_length=1, max_length=500, description="why; shown to whoever is refused"
    )
    expires_in: StrictInt | StrictStr | None = Field(
        None,
        description="seconds, or a duration such as 30m, 2h, 1d (at most 90 days); "
        "default: until released",
    )


class LockOut(Schema):
    environment: str
    reason: str
    locked_by: str
    locked_at: datetime
    expires_at: datetime | None


class ApproversOut(Schema):
    users: list[str]
    groups: list[str]


class EnvironmentOut(Schema):
    name: str
    protected: bool
    required_approvals: int
    approvers: ApproversOut
    allow_self_approval: bool
    wait_timer: int = Field(..., description="seconds after creation before a deployment runs")
    freeze: list[dict]
    health: dict | None = Field(
        None,
        description="the health gate after each success: window and check_timeout in "
        "seconds, max_failure_rate, min_events, check, rollback (null: no gate)",
    )
    frozen: FrozenOut | None = Field(None, description="the freeze window open now, if any")
    current: DeploymentOut | None = Field(None, description="the latest successful deployment")
    latest: DeploymentOut | None
    waiting_approval: int
    deployments: int
    lock: LockOut | None = Field(None, description="the deploy lock holding it, if any")


class EnvironmentDetailOut(EnvironmentOut):
    history: list[DeploymentOut] = Field(..., description="deployments, newest first")


class HistoryQuery(Schema):
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    before: int | None = Field(None, ge=1)


class RollbackIn(Schema):
    model_config = ConfigDict(extra="forbid")

    deployment_id: int | None = Field(
        None,
        ge=1,
        description="roll back to this successful deployment (default: the last "
        "good one before the current)",
    )
    override_freeze: bool = Field(False, description="admin tokens only; audited")


class DecisionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    comment: str = Field("", max_length=2000)
    override_freeze: bool = Field(
        False, description="release inside a freeze window (audited); approve only"
    )


class DoraQuery(Schema):
    environment: str | None = Field(None, max_length=100, description="default: the project's")
    days: int = Field(30, ge=dora.ALLOWED_DAYS[0], le=dora.ALLOWED_DAYS[1])


class FrequencyOut(Schema):
    deployments: int
    per_day: float


class LeadTimeOut(Schema):
    median_seconds: float | None
    measured: int


class FailureRateOut(Schema):
    changes: int
    failed: int
    rate: float | None


class RestoreOut(Schema):
    median_seconds: float | None
    restored: int
    open: int


class DoraOut(Schema):
    project: str
    environment: str
    days: int
    since: datetime
    until: datetime
    deployment_frequency: FrequencyOut
    lead_time_for_changes: LeadTimeOut
    change_failure_rate: FailureRateOut
    time_to_restore: RestoreOut


def approver_of(request: HttpRequest) -> Approver:
    """Name the approver behind a token: the person it belongs to (None: it may not approve).

    The person is the token's ``user``, never guessed from who created it or its name.
    """
    token: ApiToken = request.auth
    user = acting_user(request)
    name = user.get_username() if user is not None else f"token:{token.name}"
    return Approver(
        name=name,
        user=user,
        aliases=frozenset({f"token:{token.name}"}),
        label=actor(request),
    )


@router.get(
    "/projects/{slug}/environments",
    response=list[EnvironmentOut],
    summary="A project's environments: rules, open freeze, current deployment",
)
def list_environments(request: HttpRequest, slug: str):
    require_scope(request, TokenScope.READ)
    return history.environment_list(visible_project(request, slug))


@router.get(
    "/projects/{slug}/environments/{name}",
    response=EnvironmentDetailOut,
    summary="One environment with its deployment history (newest first, paginated)",
)
def get_environment(
    request: HttpRequest, response: HttpResponse, slug: str, name: str, query: Query[HistoryQuery]
):
    require_scope(request, TokenScope.READ)
    project = visible_project(request, slug)
    summary = history.environment_summary(project, clean_environment(name))
    rows = paginate(
        request,
        response,
        history.environment_history(project, name),
        limit=query.limit,
        before=query.before,
    )
    return {**summary, "history": [selectors.deployment_as_dict(d) for d in rows]}


@router.post(
    "/projects/{slug}/environments/{name}/rollback",
    response={201: DeploymentOut},
    summary="Deploy the last good commit before the current one again (Idempotency-Key aware)",
)
def rollback_environment(
    request: HttpRequest,
    response: HttpResponse,
    slug: str,
    name: str,
    payload: RollbackIn | None = None,
):
    require_scope(request, TokenScope.DEPLOY, action="environment.rollback")
    payload = payload or RollbackIn()
    require_override(request, payload.override_freeze)
    project = visible_project(request, slug)

    def create(key: str | None):
        return rollback.deployment_rollback(
            project=project,
            environment=name,
            to_deployment_id=payload.deployment_id,
            triggered_by=actor(request),
            triggered_by_user=acting_user(request),
            idempotency_key=key,
            override_freeze=payload.override_freeze,
        )

    return create_once(request, response, create)


@router.post(
    "/deployments/{int:deployment_id}/approve",
    response=DeploymentOut,
    summary="Approve a deployment waiting for approval (admin scope); the last one starts it",
)
def approve(request: HttpRequest, deployment_id: int, payload: DecisionIn | None = None):
    return _decide(request, deployment_id, payload, approvals.deployment_approve)


@router.post(
    "/deployments/{int:deployment_id}/reject",
    response=DeploymentOut,
    summary="Reject a deployment waiting for approval (admin scope): it ends cancelled/rejected",
)
def reject(request: HttpRequest, deployment_id: int, payload: DecisionIn | None = None):
    return _decide(request, deployment_id, payload, approvals.deployment_reject)


def _decide(request: HttpRequest, deployment_id: int, payload: DecisionIn | None, decide):
    """An approver's decision (admin scope) on a deployment the token may see."""
    require_scope(request, TokenScope.ADMIN)
    visible_deployment(request, deployment_id)
    payload = payload or DecisionIn()
    deployment = decide(
        deployment_id=deployment_id,
        approver=approver_of(request),
        comment=payload.comment,
        override_freeze=payload.override_freeze,
    )
    return selectors.deployment_as_dict(deployment)


@router.get(
    "/projects/{slug}/metrics/dora",
    response=DoraOut,
    summary="DORA metrics of one environment over the last N days (docs/deployments.md)",
)
def dora_metrics(request: HttpRequest, slug: str, query: Query[DoraQuery]):
    require_scope(request, TokenScope.READ)
    project = visible_project(request, slug)
    environment = clean_environment(query.environment or project.default_environment)
    return dora.dora_metrics(project=project, environment=environment, days=query.days)


def _lock_holder(request: HttpRequest) -> deploy_locks.Holder:
    token: ApiToken = request.auth
    user = acting_user(request)
    admin = token.allows(TokenScope.ADMIN) and (
        user is None or allowed(user, "environment.unlock_any")
    )
    return deploy_locks.Holder(label=actor(request), user=user, token_id=token.pk, admin=admin)


@router.post(
    "/projects/{slug}/environments/{name}/lock",
    response=LockOut,
    summary="Lock an environment: new deployments to it are refused (409) until released",
)
def lock_environment(request: HttpRequest, slug: str, name: str, payload: LockIn):
    require_scope(request, TokenScope.DEPLOY, action="environment.lock")
    project = visible_project(request, slug)
    lock = deploy_locks.lock_acquire(
        project,
        name,
        reason=payload.reason,
        holder=_lock_holder(request),
        expires_in=_expiry(payload.expires_in),
    )
    return deploy_locks.lock_as_dict(lock)


@router.delete(
    "/projects/{slug}/environments/{name}/lock",
    response=LockOut,
    summary="Release an environment's lock (whoever took it, or an admin-scope token)",
)
def unlock_environment(request: HttpRequest, slug: str, name: str):
    require_scope(request, TokenScope.DEPLOY)
    project = visible_project(request, slug)
    lock = deploy_locks.lock_release(project, name, holder=_lock_holder(request))
    return deploy_locks.lock_as_dict(lock)


def _expiry(value: int | str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        raise InvalidRequest(f"expires_in: {exc}", field="expires_in") from None
