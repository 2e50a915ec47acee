"""An environment's rules applied to a new deployment: declared names, refs, freeze, gate.

``gate()`` is called by every path that creates a deployment (trigger, retry, rollback)
inside its transaction, after the environment lock: a project with ``strict_environments``
refuses an environment it does not declare, an environment's ``refs`` rule refuses other
refs, a freeze refuses the deployment (unless overridden), a protected environment makes it
``waiting_approval`` (no job, so no lock and no worker), and the wait timer delays its job.
``approvers()`` and ``may_approve()`` say who decides on a waiting deployment: always a
person (a console user, or the user an API token belongs to), compared by person.
"""

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from deployments.errors import (
    ApprovalRefused,
    EnvironmentFrozen,
    RefNotAllowed,
    UndeclaredEnvironment,
)
from deployments.freeze import OpenWindow, active_window
from deployments.models import Deployment, DeploymentStatus, Environment, Project
from jobs.models import AuditLog

APPROVE_PERMISSION = "deployments.approve_deployment"


@dataclass(frozen=True)
class Approver:
    """Who decides on a deployment: the name recorded, the person (if any), other names.

    ``user`` is the person (only a person may approve). ``label`` is what the audit log
    and the timeline show (``alice via token:ci`` for a token); ``aliases`` are further
    names the caller triggers under (an API token's ``token:<name>``), compared only for
    deployments that recorded no person.
    """

    name: str
    user: object | None = None
    aliases: frozenset[str] = frozenset()
    label: str = ""

    def identities(self) -> set[str]:
        names = {self.name, *self.aliases}
        if self.label:
            names.add(self.label)
        if self.user is not None:
            names.add(self.user.username)
        return names

    def shown(self) -> str:
        """Return how the audit log and the timeline name this approver."""
        return self.label or self.name


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


def environment_rules_save(
    *, rules: Environment, freeze: list[dict], changed: list[str], actor: str
) -> Environment:
    """Store an environment's rules as the console's form gives them, audited; return them.

    ``rules`` carries the form's values (not saved yet), ``freeze`` the windows in their stored
    form (``freeze.parse_window``'s), ``changed`` the names of the fields the form changed.
    """
    with transaction.atomic():
        rules.freeze = freeze
        rules.full_clean(validate_unique=False)
        rules.save()
        AuditLog.objects.create(
            actor=actor,
            action="environment.rules_changed",
            target_type="environment",
            target_id=str(rules),
            details={"changed": sorted(changed), "freeze_windows": len(freeze)},
        )
    return rules


def gate(
    project: Project,
    environment: str,
    *,
    ref: str,
    override_freeze: bool = False,
    now=None,
) -> Gate:
    """Apply the environment's rules to a deployment about to be created (lock held).

    Raises UndeclaredEnvironment for an environment a strict project does not declare,
    RefNotAllowed for a ref outside the environment's ``refs``, and EnvironmentFrozen while
    a freeze window is open, unless ``override_freeze`` (the caller checked the caller may,
    and audits the returned ``overridden`` window).
    """
    rules = rules_of(project, environment)
    check_declared(project, rules)
    check_ref(rules, ref)
    window = frozen_window(rules, override_freeze=override_freeze, now=now)
    status = DeploymentStatus.WAITING_APPROVAL if rules.needs_approval else DeploymentStatus.PENDING
    return Gate(rules=rules, status=status, overridden=window)


def check_declared(project: Project, rules: Environment) -> None:
    """Raise UndeclaredEnvironment if ``project`` accepts only declared environments."""
    if not project.strict_environments or rules.pk is not None:
        return
    declared = list(
        Environment.objects.filter(project=project).order_by("name").values_list("name", flat=True)
    )
    raise UndeclaredEnvironment(
        f"project {project.slug} declares its environments and {rules.name!r} is not one of "
        f"them (declared: {', '.join(declared) or 'none'})",
        declared=declared,
    )


def ref_pattern(pattern: str) -> re.Pattern:
    """Compile a refs glob as GitHub's branch policies read it: ``*`` stops at ``/``."""
    parts = re.split(r"(\*\*|\*|\?)", pattern)
    wild = {"**": ".*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(wild.get(part, re.escape(part)) for part in parts))


def check_ref(rules: Environment, ref: str) -> None:
    """Raise RefNotAllowed unless ``ref`` matches one of the environment's ``refs`` globs."""
    allowed = [pattern for pattern in rules.refs or [] if isinstance(pattern, str)]
    if not allowed or any(ref_pattern(pattern).fullmatch(ref) for pattern in allowed):
        return
    raise RefNotAllowed(
        f"environment {rules.name!r} of {rules.project.slug} admits only refs matching "
        f"{', '.join(allowed)}; {ref!r} does not match",
        ref=ref,
        allowed=list(allowed),
    )


def frozen_window(rules: Environment, *, override_freeze: bool, now=None) -> OpenWindow | None:
    """Return the open freeze window an override passes; raise EnvironmentFrozen without one."""
    window = active_window(rules.freeze, now or timezone.now())
    if window is not None and not override_freeze:
        raise EnvironmentFrozen(
            f"environment {rules.name!r} of {rules.project.slug} is frozen by "
            f"{window.describe()}; an admin token may pass override_freeze: true",
            window=window,
        )
    return window


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


def triggered_by_approver(deployment: Deployment, approver: Approver) -> bool:
    """Whether the person deciding is the person who triggered ``deployment``.

    Compared by person when the deployment recorded one; by name only for one that did not
    (triggered by the system, a token of nobody, or before persons were recorded).
    """
    if deployment.triggered_by_user_id is not None:
        return approver.user is not None and approver.user.pk == deployment.triggered_by_user_id
    return deployment.triggered_by in approver.identities()


def may_approve(rules: Environment, deployment: Deployment, approver: Approver) -> None:
    """Raise ApprovalRefused unless ``approver`` may decide on ``deployment``.

    Only a person decides: an active user with ``deployments.approve_deployment``, listed
    (by name or group) where the environment lists approvers, and not the person who
    triggered it unless the environment allows self-approval.
    """
    name, user = approver.shown(), approver.user
    if user is None:
        raise ApprovalRefused(
            f"{name} acts for no person; only a user, or a token that belongs to one "
            "(create_api_token --user), may approve"
        )
    if not user.is_active or not user.has_perm(APPROVE_PERMISSION):
        raise ApprovalRefused(
            f"{name}: user {user.username} is not an active user with the "
            f"{APPROVE_PERMISSION} permission"
        )
    if not rules.allow_self_approval and triggered_by_approver(deployment, approver):
        raise ApprovalRefused(
            f"{name} triggered deployment {deployment.pk} and cannot approve it "
            f"(environment {rules.name!r} does not allow self-approval)"
        )
    if not (rules.approver_users or rules.approver_groups):
        return
    if user.username in (rules.approver_users or []) or (
        user.groups.filter(name__in=rules.approver_groups or []).exists()
    ):
        return
    raise ApprovalRefused(
        f"{name} is not an approver of environment {rules.name!r} "
        f"(users: {', '.join(rules.approver_users) or '-'}; "
        f"groups: {', '.join(rules.approver_groups) or '-'})"
    )
