"""Read-only views of a project's environments: rules, current deployment, history.

An environment exists for these views when it has rules (an ``Environment`` row), at
least one deployment, or a deploy lock. Its *current* deployment is its latest success (by
finish time).
"""

from django.db.models import QuerySet
from django.utils import timezone

from deployments import selectors
from deployments.deploy_locks import current_lock, lock_as_dict
from deployments.errors import EnvironmentNotFound
from deployments.freeze import active_window
from deployments.models import DeployLock, Deployment, DeploymentStatus, Environment, Project
from deployments.rollback import current_deployment

S = DeploymentStatus
MAX_ENVIRONMENTS = 200


def environment_names(project: Project) -> list[str]:
    """Return the names of the project's environments (rules or deployments), sorted."""
    # By name alone: Meta.ordering (project__slug, name) would join the project to sort.
    ruled = (
        Environment.objects.filter(project=project).order_by("name").values_list("name", flat=True)
    )
    deployed = (
        Deployment.objects.filter(project=project)
        .order_by()
        .values_list("environment", flat=True)
        .distinct()
    )
    locked = DeployLock.objects.filter(project=project).values_list("environment", flat=True)
    return sorted(
        set(ruled[:MAX_ENVIRONMENTS])
        | set(deployed[:MAX_ENVIRONMENTS])
        | set(locked[:MAX_ENVIRONMENTS])
    )


def environment_history(project: Project, name: str) -> QuerySet:
    """Return the environment's deployments, newest first."""
    return Deployment.objects.select_related("project", "triggered_by_user").filter(
        project=project, environment=name
    )


def environment_summary(project: Project, name: str, *, rules: Environment | None = None) -> dict:
    """Return one environment: its rules, open freeze, current and latest deployments."""
    if rules is None:
        rules = Environment.objects.filter(project=project, name=name).first()
    history = environment_history(project, name)
    latest = history.first()
    lock = current_lock(project, name)
    if rules is None and latest is None and lock is None:
        raise EnvironmentNotFound(f"project {project.slug} has no environment {name!r}")
    current = current_deployment(project, name)
    window = active_window(rules.freeze if rules else [], timezone.now())
    return {
        "name": name,
        "protected": bool(rules and rules.needs_approval),
        "required_approvals": rules.required_approvals if rules else 0,
        "approvers": {
            "users": list(rules.approver_users) if rules else [],
            "groups": list(rules.approver_groups) if rules else [],
        },
        "allow_self_approval": bool(rules and rules.allow_self_approval),
        "wait_timer": rules.wait_timer if rules else 0,
        "freeze": list(rules.freeze) if rules else [],
        "health": dict(rules.health) if rules and rules.health else None,
        "frozen": (
            {"window": window.name, "opened_at": window.opened_at, "closes_at": window.closes_at}
            if window
            else None
        ),
        "current": _brief(current),
        "latest": _brief(latest),
        "waiting_approval": history.filter(status=S.WAITING_APPROVAL).count(),
        "deployments": history.count(),
        "lock": lock_as_dict(lock),
    }


def environment_list(project: Project) -> list[dict]:
    """Return a summary of every environment of ``project``."""
    rules = {rule.name: rule for rule in Environment.objects.filter(project=project)}
    return [
        environment_summary(project, name, rules=rules.get(name))
        for name in environment_names(project)
    ]


def _brief(deployment: Deployment | None) -> dict | None:
    if deployment is None:
        return None
    return selectors.deployment_as_dict(deployment)
