"""Roll an environment back: deploy again the last good commit before the current one.

The environment's *current* deployment is its latest success (by finish time). A rollback
targets, unless told which, the latest earlier success whose commit differs from the
current one, which no successful rollback has undone and which its health gate did not find
unhealthy (deployments.health), and creates a new deployment of that
target's ref, commit, pipeline snapshot, params and timeout, with ``rollback_of`` = the
target and ``undoes`` = the current one. It obeys the environment's freeze and approval
rules like any trigger, and is announced as ``deployment.created`` with ``rollback: true``.
"""

from django.db.models import QuerySet, TextField, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from deployments import creation
from deployments.errors import (
    DeploymentNotFound,
    InvalidRequest,
    NothingToRollBack,
    NotRollbackTarget,
)
from deployments.models import Deployment, DeploymentStatus, Project
from deployments.models.deployments import HEALTH_UNHEALTHY
from deployments.validation import clean_environment, clean_idempotency_key

S = DeploymentStatus


def successes(project: Project, environment: str) -> QuerySet:
    """Return the environment's successful deployments, latest finished first."""
    return Deployment.objects.filter(
        project=project, environment=environment, status=S.SUCCESS
    ).order_by("-finished_at", "-pk")


def current_deployment(project: Project, environment: str) -> Deployment | None:
    """Return the deployment the environment runs now: its latest success, if any."""
    return successes(project, environment).first()


def rollback_target(project: Project, environment: str, current: Deployment) -> Deployment:
    """Return the last good deployment before ``current`` to go back to, or raise."""
    earlier = (
        successes(project, environment)
        .filter(finished_at__lt=current.finished_at)
        .exclude(commit_sha=current.commit_sha)
        .exclude(undone_by__status=S.SUCCESS)
        # Coalesced: a missing key compares as NULL, and NOT NULL would drop every row.
        .alias(health_status=Coalesce(KT("health__status"), Value(""), output_field=TextField()))
        .exclude(health_status=HEALTH_UNHEALTHY)
        .first()
    )
    if earlier is None:
        raise NothingToRollBack(
            f"environment {environment!r} of {project.slug} has no successful deployment "
            f"of another commit before deployment {current.pk} to roll back to"
        )
    return earlier


def deployment_rollback(
    *,
    project: Project,
    environment: str,
    to_deployment_id: int | None = None,
    triggered_by: str = "system",
    triggered_by_user=None,
    idempotency_key: str | None = None,
    override_freeze: bool = False,
    reason: str = "",
) -> Deployment:
    """Create the rollback deployment of ``environment``; return it.

    ``reason`` (the health gate's, say) is kept in the ``deployment.rollback`` audit entry.

    Raises NothingToRollBack when the environment has no current deployment or nothing
    before it, NotRollbackTarget when ``to_deployment_id`` never succeeded or is current.
    """
    environment = clean_environment(environment)

    def plan() -> creation.Plan:
        current = current_deployment(project, environment)
        if current is None:
            raise NothingToRollBack(
                f"environment {environment!r} of {project.slug} has no successful deployment"
            )
        target = (
            rollback_target(project, environment, current)
            if to_deployment_id is None
            else _chosen(project, environment, to_deployment_id, current)
        )
        details = {"to": target.pk, "commit": target.commit_sha}
        if reason:
            details["reason"] = reason
        return creation.Plan(
            fields={
                "ref": target.ref,
                "commit_sha": target.commit_sha,
                "pipeline": target.pipeline,
                "pipeline_name": target.pipeline_name,
                "params": target.params,
                "steps": target.steps,
                "timeout": target.timeout,
                "rollback_of": target,
                "undoes": current,
            },
            audit=("deployment.rollback", current, details),
        )

    return creation.create(
        project=project,
        environment=environment,
        request={"rollback": environment, "to": to_deployment_id},
        plan=plan,
        triggered_by=triggered_by,
        triggered_by_user=triggered_by_user,
        idempotency_key=clean_idempotency_key(idempotency_key),
        override_freeze=override_freeze,
    )


def _chosen(project: Project, environment: str, deployment_id: int, current: Deployment):
    target = Deployment.objects.filter(pk=deployment_id, project=project).first()
    if target is None:
        raise DeploymentNotFound(f"project {project.slug} has no deployment {deployment_id}")
    if target.environment != environment:
        raise InvalidRequest(
            f"deployment {target.pk} was a deployment to {target.environment!r}, "
            f"not {environment!r}",
            field="deployment_id",
        )
    if target.status != S.SUCCESS:
        raise NotRollbackTarget(
            f"deployment {target.pk} never succeeded ({target.status}); "
            "only a successful deployment can be rolled back to"
        )
    if target.pk == current.pk:
        raise NotRollbackTarget(f"deployment {target.pk} is already the current deployment")
    return target
