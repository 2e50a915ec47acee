"""Creating a deployment: the one path a trigger, a retry and a rollback share.

``create`` takes the environment lock, answers a repeated idempotency key with the
deployment it made the first time, refuses an environment someone holds a deploy lock on
(deployments.deploy_locks), asks the caller's ``plan`` (under the lock) what the new
deployment runs, applies the environment's gate (freeze, approval, wait timer), inserts the
row and, when it may start, its job, writes the caller's audit entry, and announces it.
deployments.services (trigger and retry) and deployments.rollback differ only in their plan.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from deployments import environments, policy
from deployments.deploy_locks import refuse_if_locked
from deployments.environments import Gate
from deployments.errors import IdempotencyConflict
from deployments.events import emit, emit_approval_requested, log_deployment
from deployments.locks import lock_environment
from deployments.models import Deployment, DeploymentStatus, Project
from jobs.models import AuditLog
from jobs.services import enqueue, job_supersede
from project.constraints import violates

S = DeploymentStatus
RUN_TASK = "deployments.run"
RUN_QUEUE = "deployments"


@dataclass(frozen=True)
class Plan:
    """What a new deployment runs, and the audit entry its creation writes (if any).

    ``fields`` are the Deployment's own: ``ref``, ``pipeline``, ``pipeline_name``, ``params``,
    ``steps``, ``timeout`` and, as the kind asks, ``commit_sha``, ``retry_of``, ``attempt``,
    ``rollback_of``, ``undoes``. ``audit`` is ``(action, target, details)``; the new
    deployment's id is added to its details. ``supersedes_job`` is the id of a job whose
    work the new deployment takes over (a retry's original's): if dead, it stops being a
    dead letter.
    """

    fields: dict
    audit: tuple[str, Deployment, dict] | None = None
    supersedes_job: int | None = None


def create(
    *,
    project: Project,
    environment: str,
    request: dict,
    plan: Callable[[], Plan],
    triggered_by: str,
    triggered_by_user: AbstractBaseUser | None = None,
    idempotency_key: str | None = None,
    override_freeze: bool = False,
) -> Deployment:
    """Create the deployment ``plan`` describes in ``project``'s ``environment``; return it.

    ``request`` is what the caller asked for, as an idempotency key's fingerprint compares
    it: the same key with the same request answers the first deployment, with another one
    raises IdempotencyConflict.
    """
    if override_freeze:
        request = {**request, "override_freeze": True}
    fingerprint = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
    with transaction.atomic():
        lock_environment(project.pk, environment)
        if idempotency_key is not None:
            existing = replay(project, idempotency_key, fingerprint)
            if existing is not None:
                return existing
        refuse_if_locked(project, environment)
        chosen = plan()
        ref = chosen.fields["ref"]
        gate = environments.gate(project, environment, ref=ref, override_freeze=override_freeze)
        try:
            with transaction.atomic():
                deployment = _insert(
                    project,
                    gate,
                    environment=environment,
                    triggered_by=triggered_by,
                    triggered_by_user=triggered_by_user,
                    idempotency_key=idempotency_key,
                    request_fingerprint=fingerprint if idempotency_key else "",
                    **chosen.fields,
                )
        except IntegrityError as exc:
            if idempotency_key is None or not violates(
                exc, Deployment, "deployment_idempotency_unique"
            ):
                raise
            # The same key was used at the same moment for another environment.
            existing = replay(project, idempotency_key, fingerprint)
            if existing is None:
                raise
            return existing
        if chosen.audit is not None:
            action, target, details = chosen.audit
            audit(triggered_by, action, target, {"new_deployment": deployment.pk, **details})
        job_supersede([chosen.supersedes_job], actor=triggered_by)
        return _announce(deployment, gate, actor=triggered_by)


def replay(project: Project, key: str, fingerprint: str) -> Deployment | None:
    """The deployment ``key`` made before, if any; IdempotencyConflict for another request."""
    existing = (
        Deployment.objects.select_related("project")
        .filter(project=project, idempotency_key=key)
        .first()
    )
    if existing is not None and existing.request_fingerprint != fingerprint:
        raise IdempotencyConflict(f"idempotency key {key!r} was used for a different request")
    return existing


def enqueue_run(deployment: Deployment, *, run_after: datetime | None = None) -> None:
    """Write the job that runs ``deployment`` (published when the transaction commits)."""
    job = enqueue(RUN_TASK, {"deployment_id": deployment.pk}, queue=RUN_QUEUE, run_after=run_after)
    deployment.job_id = job.pk
    Deployment.objects.filter(pk=deployment.pk).update(job_id=job.pk)


def audit(actor: str, action: str, deployment: Deployment, details: dict) -> None:
    """Record an operator's action on ``deployment`` in the audit log."""
    AuditLog.objects.create(
        actor=actor,
        action=action,
        target_type="deployment",
        target_id=str(deployment.pk),
        details=details,
    )


def _insert(project: Project, gate: Gate, **fields) -> Deployment:
    now = timezone.now()
    deployment = Deployment.objects.create(
        project=project, created_at=now, updated_at=now, status=gate.status, **fields
    )
    if gate.status == S.PENDING:
        enqueue_run(deployment, run_after=gate.run_after(now))
    return deployment


def _announce(deployment: Deployment, gate: Gate, *, actor: str) -> Deployment:
    if gate.overridden is not None:
        audit(
            actor,
            "deployment.freeze_override",
            deployment,
            {"window": gate.overridden.name, "closes_at": gate.overridden.closes_at.isoformat()},
        )
    if deployment.status == S.PENDING:
        policy.on_create(deployment, deployment.project.concurrency_policy)
    log_deployment("deployment.created", deployment, job_id=deployment.job_id)
    emit("deployment.created", deployment)
    if deployment.status == S.WAITING_APPROVAL:
        emit_approval_requested(deployment, gate.rules, environments.approvers(gate.rules))
    return deployment
