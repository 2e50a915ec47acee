"""The deployments services: create, cancel, retry and claim. Every edge calls these.

API views, admin actions, management commands and the ``deployments.run`` task call these
functions; none of them changes a deployment any other way. Functions are keyword-only and
raise the domain errors of ``deployments.errors``.
"""

from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from deployments import conf, creation, lifecycle, policy, routing
from deployments.creation import audit
from deployments.errors import (
    DeploymentNotFound,
    InvalidRequest,
    NotCancellable,
    NotRetryable,
    PipelineNotFound,
    ProjectNotFound,
)
from deployments.events import log_deployment
from deployments.locks import lock_environment
from deployments.models import (
    NOT_STARTED,
    Deployment,
    DeploymentEvent,
    DeploymentStatus,
    FailureReason,
    Pipeline,
    Project,
)
from deployments.policy import Decision
from deployments.validation import (
    clean_environment,
    clean_idempotency_key,
    clean_params,
    clean_ref,
)
from jobs.models import Job
from jobs.services import job_snooze

S = DeploymentStatus


def deployment_create(
    *,
    project: Project | str,
    ref: str,
    environment: str | None = None,
    pipeline: str | None = None,
    params: dict | None = None,
    triggered_by: str = "system",
    triggered_by_user: AbstractBaseUser | None = None,
    idempotency_key: str | None = None,
    override_freeze: bool = False,
) -> Deployment:
    """Create a deployment and (unless it must wait for approval) its job; return it.

    The pipeline's steps are copied into the deployment, so later edits never change it.
    The environment's rules apply (``deployments.environments.gate``): a freeze raises
    EnvironmentFrozen unless ``override_freeze`` (the caller checked who may; it is
    audited), a protected environment makes it ``waiting_approval``.
    A repeated ``idempotency_key`` with the same request returns the first deployment; with
    a different request it raises IdempotencyConflict.
    """
    project = _project(project)
    ref = clean_ref(ref)
    environment = clean_environment(environment or project.default_environment)
    pipeline_name = pipeline or project.default_pipeline
    params = clean_params(params)
    request = {"ref": ref, "environment": environment, "pipeline": pipeline_name, "params": params}

    def plan() -> creation.Plan:
        found = Pipeline.objects.filter(project=project, name=pipeline_name).first()
        if found is None:
            raise PipelineNotFound(f"project {project.slug} has no pipeline {pipeline_name!r}")
        steps = found.snapshot()
        if not steps:
            raise InvalidRequest(f"pipeline {pipeline_name!r} has no steps", field="pipeline")
        return creation.Plan(
            fields={
                "ref": ref,
                "pipeline": found,
                "pipeline_name": pipeline_name,
                "params": params,
                "steps": steps,
                "timeout": project.deployment_timeout,
            }
        )

    return creation.create(
        project=project,
        environment=environment,
        request=request,
        plan=plan,
        triggered_by=triggered_by,
        triggered_by_user=triggered_by_user,
        idempotency_key=clean_idempotency_key(idempotency_key),
        override_freeze=override_freeze,
    )


def deployment_retry(
    *,
    deployment_id: int,
    triggered_by: str = "system",
    triggered_by_user: AbstractBaseUser | None = None,
    idempotency_key: str | None = None,
    override_freeze: bool = False,
) -> Deployment:
    """Create a new deployment re-running a finished one: same snapshot, commit and params.

    The new deployment has ``retry_of`` set and ``attempt + 1`` (and keeps the rollback
    lineage of a rollback it re-runs). Raises NotRetryable unless the original has
    finished. The environment's rules apply as for a trigger.
    """
    original = _deployment(deployment_id)

    def plan() -> creation.Plan:
        original.refresh_from_db(fields=["status"])
        if not original.is_finished:
            raise NotRetryable(
                f"deployment {original.pk} is {original.status}: only a finished one can be retried"
            )
        return creation.Plan(
            fields={
                "ref": original.ref,
                "commit_sha": original.commit_sha,
                "pipeline": original.pipeline,
                "pipeline_name": original.pipeline_name,
                "params": original.params,
                "steps": original.steps,
                "timeout": original.timeout,
                "retry_of": original,
                "attempt": original.attempt + 1,
                "rollback_of_id": original.rollback_of_id,
                "undoes_id": original.undoes_id,
            },
            audit=("deployment.retry", original, {}),
            supersedes_job=original.job_id,
        )

    return creation.create(
        project=original.project,
        environment=original.environment,
        request={"retry_of": original.pk},
        plan=plan,
        triggered_by=triggered_by,
        triggered_by_user=triggered_by_user,
        idempotency_key=clean_idempotency_key(idempotency_key),
        override_freeze=override_freeze,
    )


def deployment_cancel(*, deployment_id: int, actor: str) -> Deployment:
    """Cancel a deployment: at once before it starts, by stopping its steps while running.

    A running deployment moves to ``cancelling`` and its runner stops the current step
    (SIGTERM, grace, SIGKILL) before it becomes ``cancelled``. Cancelling one that is already
    cancelling is a no-op; a finished one raises NotCancellable.
    """
    with transaction.atomic():
        deployment = _deployment(deployment_id)
        lock_environment(deployment.project_id, deployment.environment)
        deployment.refresh_from_db()
        for _ in range(3):  # statuses only move forward, so this settles quickly
            if deployment.status in NOT_STARTED:
                moved = lifecycle.cancel_pending(
                    deployment, reason=FailureReason.CANCELLED, actor=actor
                )
            elif deployment.status == S.RUNNING:
                moved = lifecycle.request_stop(
                    deployment, reason=FailureReason.CANCELLED, actor=actor
                )
            elif deployment.status == S.CANCELLING:
                return deployment
            else:
                raise NotCancellable(
                    f"deployment {deployment.pk} has already finished ({deployment.status})"
                )
            if moved is not None:
                audit(actor, "deployment.cancel", moved, {"status": moved.status})
                return moved
            deployment.refresh_from_db()
        raise NotCancellable(f"deployment {deployment.pk} kept changing; try again")


@dataclass(frozen=True)
class Claim:
    decision: Decision | None  # None: nothing to run (gone, finished or not this job's)
    deployment: Deployment | None = None


def deployment_claim(*, deployment_id: int, job: Job) -> Claim:
    """Decide, under the environment lock, whether ``job`` runs its deployment now.

    RUN: the deployment moved ``pending -> running`` (one conditional UPDATE) for the job's
    worker. WAIT: another deployment holds the environment; the job is snoozed here, still
    under the lock (so the one that holds it cannot finish unseen and miss waking it), and
    the caller raises ``Snooze``. SUPERSEDED or None: there is nothing to run.
    """
    job_id, worker = job.pk, job.locked_by
    with transaction.atomic():
        deployment = Deployment.objects.select_related("project").filter(pk=deployment_id).first()
        if deployment is None or deployment.status != S.PENDING or deployment.job_id != job_id:
            return Claim(None, deployment)
        lock_environment(deployment.project_id, deployment.environment)
        deployment.refresh_from_db(fields=["status"])
        if deployment.status != S.PENDING:
            return Claim(None, deployment)
        routed = _route(deployment, job)
        if routed is not None:
            return routed
        decision = policy.admit(deployment, deployment.project.concurrency_policy)
        if decision is Decision.WAIT:
            behind = policy.blocker(deployment)
            log_deployment("deployment.waiting", deployment, behind=behind and behind.pk)
            _record_wait(deployment, behind)
            job_snooze(job, seconds=wait_seconds(), reason="waiting for its environment")
            return Claim(decision, deployment)
        if decision is Decision.SUPERSEDED:
            lifecycle.cancel_pending(
                deployment, reason=FailureReason.SUPERSEDED, actor=policy.ACTOR
            )
            return Claim(decision, deployment)
        running = lifecycle.start(deployment, worker=worker)
        if running is None:
            return Claim(None, deployment)
        running.project = deployment.project
        return Claim(decision, running)


def _route(deployment: Deployment, job: Job) -> Claim | None:
    """Apply ``runs_on`` (deployments.routing); None when the deployment may run here."""
    decided = routing.decide(deployment)
    if decided.route is routing.Route.HERE:
        routing.clear_waiting(deployment)
        return None
    if decided.route is routing.Route.FAIL:
        failed = routing.fail_unmatched(deployment, decided.note, job_id=job.pk)
        return Claim(None, failed or deployment)
    routing.note_waiting(deployment, decided.note)
    if decided.route is routing.Route.MOVED:
        routing.move_job(job, decided.host)
        log_deployment("deployment.routed", deployment, host=decided.host)
        job_snooze(job, seconds=routing.MOVE_DELAY_SECONDS, reason=f"routed to {decided.host}")
    else:
        job_snooze(job, seconds=wait_seconds(), reason="waiting for a deployer with its tags")
    return Claim(Decision.WAIT, deployment)


def _record_wait(deployment: Deployment, behind: Deployment | None) -> None:
    """Note for the timeline that ``deployment`` waits behind ``behind`` (once per blocker)."""
    behind_id = behind.pk if behind is not None else None
    last = deployment.events.filter(kind=DeploymentEvent.WAITING).order_by("-at", "-id").first()
    if last is not None and last.details.get("behind") == behind_id:
        return
    DeploymentEvent.objects.create(
        deployment=deployment,
        kind=DeploymentEvent.WAITING,
        at=timezone.now(),
        details={"behind": behind_id, "behind_status": behind.status if behind else None},
    )


def wait_seconds() -> float:
    """Return how long a deployment that must wait snoozes before it looks again."""
    return conf.get().wait.total_seconds()


def _project(project: Project | str) -> Project:
    if isinstance(project, Project):
        return project
    found = Project.objects.filter(slug=project).first()
    if found is None:
        raise ProjectNotFound(f"no project {project!r}")
    return found


def _deployment(deployment_id: int) -> Deployment:
    found = Deployment.objects.select_related("project").filter(pk=deployment_id).first()
    if found is None:
        raise DeploymentNotFound(f"no deployment {deployment_id}")
    return found
