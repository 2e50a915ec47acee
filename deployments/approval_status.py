"""Where a deployment waiting for approval stands: for its console page and the dashboard.

Read-only. Who may decide is answered by the same ``environments.may_approve`` the approval
service applies, so the page offers the buttons exactly to the people whose decision the
service would record (the service checks again when they post).
"""

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from deployments import conf, environments
from deployments.environments import APPROVE_PERMISSION, Approver
from deployments.errors import ApprovalRefused
from deployments.models import ApprovalDecision, Deployment, DeploymentStatus

# How many of the people who may approve the page names before it says "and N more".
APPROVERS_SHOWN = 20
# The most deployments waiting for approval the dashboard lists (oldest first).
DASHBOARD_ROWS = 50


@dataclass(frozen=True)
class ApprovalStatus:
    """A waiting deployment's approvals: needed and given, who may give them, its clock."""

    required: int
    approved: int
    decisions: list  # Approval rows, oldest first
    approver_users: list[str]  # as the environment lists them (empty: anyone permitted)
    approver_groups: list[str]
    eligible: list[str]  # active users who may approve now, at most APPROVERS_SHOWN
    eligible_more: int  # how many more there are
    allow_self_approval: bool
    waited_seconds: float
    expires_at: datetime
    wait_timer: int  # seconds after creation before it may start, once approved
    can_decide: bool  # whether the viewer may approve or reject it
    refusal: str  # why not, when the viewer has the permission but may not decide

    @property
    def missing(self) -> int:
        return max(0, self.required - self.approved)

    @property
    def waited(self) -> str:
        return duration_text(self.waited_seconds)


def duration_text(seconds: float) -> str:
    """Say how long, to the second under a minute: ``42 s``, ``7 min``, ``3 h 05 min``."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def approval_status(deployment: Deployment, *, user, now=None) -> ApprovalStatus | None:
    """Return where ``deployment`` stands on approvals, or None unless it waits for them."""
    if deployment.status != DeploymentStatus.WAITING_APPROVAL:
        return None
    now = now or timezone.now()
    rules = environments.rules_of(deployment.project, deployment.environment)
    decisions = list(deployment.approvals.order_by("at", "pk"))
    eligible = sorted(u.get_username() for u in environments.approvers(rules))
    can_decide, refusal = _may_decide(rules, deployment, user, decisions)
    return ApprovalStatus(
        required=rules.required_approvals,
        approved=sum(d.decision == ApprovalDecision.APPROVED for d in decisions),
        decisions=decisions,
        approver_users=list(rules.approver_users or []),
        approver_groups=list(rules.approver_groups or []),
        eligible=eligible[:APPROVERS_SHOWN],
        eligible_more=max(0, len(eligible) - APPROVERS_SHOWN),
        allow_self_approval=rules.allow_self_approval,
        waited_seconds=(now - deployment.created_at).total_seconds(),
        expires_at=deployment.created_at + conf.get().approval_timeout,
        wait_timer=rules.wait_timer,
        can_decide=can_decide,
        refusal=refusal,
    )


def _may_decide(rules, deployment: Deployment, user, decisions: list) -> tuple[bool, str]:
    if not user.has_perm(APPROVE_PERMISSION):
        return False, ""
    if any(d.approver == user.get_username() for d in decisions):
        return False, "you have decided on this deployment already"
    try:
        environments.may_approve(rules, deployment, Approver(name=user.get_username(), user=user))
    except ApprovalRefused as exc:
        return False, str(exc)
    return True, ""


def waiting_for_approval(now=None) -> list[dict]:
    """Deployments waiting for approval, oldest first, with how long each has waited."""
    now = now or timezone.now()
    found = (
        Deployment.objects.select_related("project")
        .filter(status=DeploymentStatus.WAITING_APPROVAL)
        .order_by("created_at", "pk")[:DASHBOARD_ROWS]
    )
    rows = []
    for d in found:
        waited = (now - d.created_at).total_seconds()
        rows.append({"deployment": d, "waited": waited, "waited_text": duration_text(waited)})
    return rows
