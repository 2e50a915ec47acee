"""Approve or reject a deployment waiting for approval; expire the ones nobody decided on.

A deployment to a protected environment is created ``waiting_approval`` with no job. Each
approver decides once (an ``Approval`` row, audited). One rejection ends it ``cancelled``
with reason ``rejected``; the ``required_approvals``-th distinct approval moves it to
``pending`` and writes its job, from which point the per-environment lock and the
concurrency policy apply as for any deployment. Only a person approves
(``environments.may_approve``).

The freeze is checked again at release: an approval that would start the deployment while
a freeze window is open is refused (409 ``environment_frozen``, nothing recorded) and the
deployment keeps waiting, so it can be approved once the window closes; an approver may
pass ``override_freeze``, audited as ``deployment.freeze_override`` as at trigger.

Past ``CONVEYOR_APPROVAL_TIMEOUT`` it ends ``cancelled/approval_expired``
(``deployments.maintenance.approvals`` sweeps; a decision arriving late expires it too).
"""

from django.db import transaction
from django.utils import timezone

from deployments import conf, environments, lifecycle, policy
from deployments.creation import audit, enqueue_run
from deployments.environments import Approver
from deployments.errors import AlreadyDecided, DeploymentNotFound, NotWaitingApproval
from deployments.events import log_deployment
from deployments.locks import lock_environment
from deployments.models import (
    Approval,
    ApprovalDecision,
    Deployment,
    DeploymentEvent,
    DeploymentStatus,
    FailureReason,
)

S = DeploymentStatus
EXPIRY_ACTOR = "approval-expiry"


def deployment_approve(
    *,
    deployment_id: int,
    approver: Approver,
    comment: str = "",
    override_freeze: bool = False,
) -> Deployment:
    """Record ``approver``'s approval; start the deployment once it has enough of them.

    Raises EnvironmentFrozen (recording nothing) when this approval would start it inside
    an open freeze window, unless ``override_freeze``.
    """
    return _decide(deployment_id, approver, ApprovalDecision.APPROVED, comment, override_freeze)


def deployment_reject(
    *, deployment_id: int, approver: Approver, comment: str = "", override_freeze: bool = False
) -> Deployment:
    """Record ``approver``'s rejection, which ends the deployment ``cancelled/rejected``."""
    return _decide(deployment_id, approver, ApprovalDecision.REJECTED, comment, False)


def _decide(
    deployment_id: int, approver: Approver, decision: str, comment: str, override_freeze: bool
) -> Deployment:
    found = Deployment.objects.filter(pk=deployment_id).values("project_id", "environment").first()
    if found is None:
        raise DeploymentNotFound(f"no deployment {deployment_id}")
    expired = None
    with transaction.atomic():
        lock_environment(found["project_id"], found["environment"])
        deployment = Deployment.objects.select_related("project").get(pk=deployment_id)
        if deployment.status != S.WAITING_APPROVAL:
            raise NotWaitingApproval(
                f"deployment {deployment.pk} is {deployment.status}, not waiting for approval"
            )
        if _expired(deployment):
            expired = _expire(deployment)
        else:
            rules = environments.rules_of(deployment.project, deployment.environment)
            environments.may_approve(rules, deployment, approver)
            _record(deployment, approver, decision, comment[:2000])
            if decision == ApprovalDecision.REJECTED:
                return _reject(deployment, approver)
            approvals = deployment.approvals.filter(decision=ApprovalDecision.APPROVED).count()
            if approvals >= rules.required_approvals:
                # Raised inside the atomic block: the approval above is rolled back too.
                window = environments.frozen_window(rules, override_freeze=override_freeze)
                released = _release(deployment, rules, approvals=approvals)
                if window is not None:
                    audit(
                        approver.shown(),
                        "deployment.freeze_override",
                        released,
                        {"window": window.name, "closes_at": window.closes_at.isoformat()},
                    )
                return released
            log_deployment("deployment.approved_once", deployment, approver=approver.shown())
            return deployment
    # Outside the atomic block, so the expiry stays committed while the caller hears why.
    raise NotWaitingApproval(
        f"deployment {deployment_id} waited longer than CONVEYOR_APPROVAL_TIMEOUT "
        f"and has expired ({expired.failure_reason if expired else 'already ended'})"
    )


def _record(deployment: Deployment, approver: Approver, decision: str, comment: str) -> None:
    # Every decision holds the environment lock, so this check and the insert cannot race;
    # the unique constraint stays as the database's own guard.
    if deployment.approvals.filter(approver=approver.name).exists():
        raise AlreadyDecided(f"{approver.name} already decided on deployment {deployment.pk}")
    Approval.objects.create(
        deployment=deployment,
        approver=approver.name,
        user=approver.user,
        decision=decision,
        comment=comment,
    )
    audit(approver.shown(), f"deployment.{decision}", deployment, {"comment": comment})


def _reject(deployment: Deployment, approver: Approver) -> Deployment:
    cancelled = lifecycle.cancel_pending(
        deployment, reason=FailureReason.REJECTED, actor=approver.shown()
    )
    return cancelled or deployment


def _release(deployment: Deployment, rules, *, approvals: int) -> Deployment:
    """Move an approved deployment to ``pending`` and write its job (lock held)."""
    pending = lifecycle.release(deployment)
    if pending is None:
        return deployment
    pending.project = deployment.project
    gate = environments.Gate(rules=rules, status=S.PENDING, overridden=None)
    enqueue_run(pending, run_after=gate.run_after(pending.created_at))
    policy.on_create(pending, pending.project.concurrency_policy)
    DeploymentEvent.objects.create(
        deployment=pending,
        kind=DeploymentEvent.RELEASED,
        at=timezone.now(),
        details={"approvals": approvals, "required": rules.required_approvals},
    )
    log_deployment("deployment.approved", pending, approvals=approvals, job_id=pending.job_id)
    return pending


def _expired(deployment: Deployment, now=None) -> bool:
    deadline = deployment.created_at + conf.get().approval_timeout
    return (now or timezone.now()) >= deadline


def _expire(deployment: Deployment) -> Deployment | None:
    expired = lifecycle.cancel_pending(
        deployment, reason=FailureReason.APPROVAL_EXPIRED, actor=EXPIRY_ACTOR
    )
    if expired is not None:
        audit(EXPIRY_ACTOR, "deployment.approval_expired", expired, {})
    return expired


def approvals_expire(*, now=None) -> int:
    """End every deployment that waited for approval past the timeout; return how many."""
    now = now or timezone.now()
    cutoff = now - conf.get().approval_timeout
    waiting = Deployment.objects.filter(status=S.WAITING_APPROVAL, created_at__lte=cutoff)
    count = 0
    for deployment_id, project_id, environment in waiting.values_list(
        "pk", "project_id", "environment"
    ).order_by("pk")[:1000]:
        with transaction.atomic():
            lock_environment(project_id, environment)
            deployment = Deployment.objects.select_related("project").get(pk=deployment_id)
            if deployment.status == S.WAITING_APPROVAL and _expired(deployment, now):
                count += _expire(deployment) is not None
    return count
