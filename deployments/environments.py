"""An environment's rules applied to a new deployment: freeze, approval gate, wait timer.

``gate()`` is called by every path that creates a deployment (trigger, retry, rollback)
inside its transaction, after the environment lock: a freeze refuses the deployment (unless
overridden), a protected environment makes it ``waiting_approval`` (no job, so no lock and
no worker), and the wait timer delays its job. ``approvers()`` and ``may_approve()`` say who
decides on a waiting deployment.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q
from django.utils import timezone

from deployments.errors import ApprovalRefused, EnvironmentFrozen
from deployments.freeze import OpenWindow, active_window
from deployments.models import Deployment, DeploymentStatus, Environment, Project

APPROVE_PERMISSION = "deployments.approve_deployment"


@dataclass(frozen=True)
class Approver:
    """Who decides on a deployment: the name recorded, the user (if any), other names.

    ``aliases`` are further names the same caller triggers deployments under (an API
    token's ``token:<name>``), so self-approval is recognised whichever name was used.
    """

    name: str
    user: object | None = None
    aliases: frozenset[str] = frozenset()

    def identities(self) -> set[str]:
        names = {self.name, *self.aliases}
        if self.user is not None:
            names.add(self.user.username)
        return names


@dataclass(frozen=True)
class Gate:
    """How a new deployment enters its environment."""

    rules: Environment
    status: DeploymentStatus  # waiting_approval or pending
    overridden: OpenWindow | None  # the freeze window an override passed, if any

    def run_after(self, created_at: datetime) -> datetime | None:
        """Return when the deployment's job may run at the earliest (the wait timer)."""
        if not self.rules.wait_timer:
            return None
        return max(created_at + timedelta(seconds=self.rules.wait_timer), timezone.now())


def rules_of(project: Project, environment: str) -> Environment:
    """Return the environment's rules: its row, or an unsaved unprotected default."""
    found = Environment.objects.filter(project=project, name=environment).first()
    return found or Environment(project=project, name=environment)


def gate(project: Project, environment: str, *, override_freeze: bool = False, now=None) -> Gate:
    """Apply the environment's rules to a deployment about to be created (lock held).

    Raises EnvironmentFrozen while a freeze window is open, unless ``override_freeze`` (the
    caller checked the caller may, and audits the returned ``overridden`` window).
    """
    rules = rules_of(project, environment)
    window = active_window(rules.freeze, now or timezone.now())
    if window is not None and not override_freeze:
        raise EnvironmentFrozen(
            f"environment {environment!r} of {project.slug} is frozen by {window.describe()}; "
            "an admin token may pass override_freeze: true",
            window=window,
        )
    status = DeploymentStatus.WAITING_APPROVAL if rules.needs_approval else DeploymentStatus.PENDING
    return Gate(rules=rules, status=status, overridden=window)


def approvers(rules: Environment) -> list:
    """Return the active users who may approve in this environment (for notices)."""
    users = get_user_model().objects.filter(is_active=True)
    if rules.approver_users or rules.approver_groups:
        named = Q(username__in=rules.approver_users or []) | Q(
            groups__name__in=rules.approver_groups or []
        )
        return list(users.filter(named).distinct())
    permission = Permission.objects.filter(
        content_type__app_label="deployments", codename="approve_deployment"
    )
    allowed = (
        Q(is_superuser=True)
        | Q(user_permissions__in=permission)
        | Q(groups__permissions__in=permission)
    )
    return list(users.filter(allowed, is_staff=True).distinct())


def may_approve(rules: Environment, deployment: Deployment, approver: Approver) -> None:
    """Raise ApprovalRefused unless ``approver`` may decide on ``deployment``."""
    name, user = approver.name, approver.user
    if not rules.allow_self_approval and deployment.triggered_by in approver.identities():
        raise ApprovalRefused(
            f"{name} triggered deployment {deployment.pk} and cannot approve it "
            f"(environment {rules.name!r} does not allow self-approval)"
        )
    if not (rules.approver_users or rules.approver_groups):
        return
    if user is not None and (
        user.username in (rules.approver_users or [])
        or user.groups.filter(name__in=rules.approver_groups or []).exists()
    ):
        return
    raise ApprovalRefused(
        f"{name} is not an approver of environment {rules.name!r} "
        f"(users: {', '.join(rules.approver_users) or '-'}; "
        f"groups: {', '.join(rules.approver_groups) or '-'})"
    )
