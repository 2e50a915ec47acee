"""The moves of a deployment's life after its creation, each with its event and log line.

Services, the concurrency policy, the runner and the dead-job handler all change a
deployment's status through these functions, never directly.
"""

import contextlib

from django.db.models import Q
from django.utils import timezone

from deployments.events import emit, emit_finished, log_deployment
from deployments.health import health_watch
from deployments.locks import lock_environment
from deployments.models import (
    NOT_STARTED,
    Deployment,
    DeploymentStatus,
    FailureReason,
    StepRun,
    StepStatus,
)
from deployments.transitions import transition
from jobs import services as jobs
from jobs.errors import IllegalTransition, JobNotFound
from project.timing import seconds_between

S = DeploymentStatus


def _cancel_job(deployment: Deployment, *, actor: str) -> None:
    """Cancel the deployment's job (at once if waiting, by request if running)."""
    if deployment.job_id is None:
        return
    with contextlib.suppress(IllegalTransition, JobNotFound):  # it ended: nothing to stop
        jobs.job_cancel(deployment.job_id, actor=actor)


def cancel_pending(deployment: Deployment, *, reason: str, actor: str) -> Deployment | None:
    """Cancel a deployment that has not started (pending or waiting for approval).

    Returns None if it has started or ended meanwhile.
    """
    moved = transition(Q(pk=deployment.pk), S.CANCELLED, from_=NOT_STARTED, failure_reason=reason)
    if not moved:
        return None
    cancelled = moved[0]
    StepRun.objects.filter(deployment=cancelled).update(status=StepStatus.SKIPPED)
    _cancel_job(cancelled, actor=actor)
    log_deployment("deployment.cancelled", cancelled, actor=actor)
    emit_finished(cancelled)
    wake_next(cancelled)
    return cancelled


def release(deployment: Deployment) -> Deployment | None:
    """Move a deployment approved enough from ``waiting_approval`` to ``pending``.

    Returns None if it had moved meanwhile. The caller (deployments.approvals) writes its job.
    """
    moved = transition(Q(pk=deployment.pk), S.PENDING, from_=[S.WAITING_APPROVAL])
    return moved[0] if moved else None


def request_stop(deployment: Deployment, *, reason: str, actor: str) -> Deployment | None:
    """Ask a running deployment to stop (``cancelling``); None if it is not running."""
    moved = transition(Q(pk=deployment.pk), S.CANCELLING, from_=[S.RUNNING], failure_reason=reason)
    if not moved:
        return None
    _cancel_job(moved[0], actor=actor)
    log_deployment("deployment.cancel_requested", moved[0], actor=actor)
    return moved[0]


def start(deployment: Deployment, *, worker: str) -> Deployment | None:
    """Move a pending deployment to ``running`` and lay out its step runs; None if lost."""
    moved = transition(Q(pk=deployment.pk), S.RUNNING, from_=[S.PENDING], worker=worker)
    if not moved:
        return None
    running = moved[0]
    StepRun.objects.bulk_create(
        StepRun(
            deployment=running,
            position=position,
            name=step["name"],
            continue_on_error=bool(step.get("continue_on_error")),
        )
        for position, step in enumerate(running.steps, start=1)
    )
    log_deployment("deployment.claimed", running, worker=worker, job_id=running.job_id)
    return running


def announce_started(deployment: Deployment) -> None:
    """Announce that steps are about to run (the commit is resolved by now)."""
    log_deployment("deployment.started", deployment)
    emit("deployment.started", deployment)


def finish(
    deployment: Deployment, to: DeploymentStatus, *, reason: str = "", error: str = ""
) -> Deployment | None:
    """Record how the runner ended a deployment; None if it had already been ended.

    Call inside a transaction: the environment lock is taken first, so a deployment that is
    deciding to wait either sees this one finished or is woken by it.
    """
    lock_environment(deployment.project_id, deployment.environment)
    # A success clears the reason a cancel request wrote: the steps finished before stopping.
    changes = {"error": error[:4000], "failure_reason": "" if to == S.SUCCESS else reason}
    moved = transition(Q(pk=deployment.pk), to, from_=[S.RUNNING, S.CANCELLING], **changes)
    if not moved:
        log_deployment("deployment.finish_lost", deployment, wanted=to)
        return None
    done = moved[0]
    if to == S.CANCELLED and not done.failure_reason:
        done.failure_reason = FailureReason.CANCELLED
        Deployment.objects.filter(pk=done.pk).update(failure_reason=done.failure_reason)
    _close_step_runs(done)
    log_deployment("deployment.finished", done, duration=_duration(done))
    emit_finished(done)
    if to == S.SUCCESS:
        health_watch(done)
    wake_next(done)
    return done


def fail_lost(
    deployment_id: int, *, reason: str, error: str, job_id: int | None = None
) -> Deployment | None:
    """Fail a deployment whose job died under it (worker lost); None if it had ended."""
    where = Q(pk=deployment_id) if job_id is None else Q(pk=deployment_id, job_id=job_id)
    moved = transition(
        where,
        S.FAILED,
        from_=[S.PENDING, S.RUNNING, S.CANCELLING],
        failure_reason=reason,
        error=error[:4000],
    )
    if not moved:
        return None
    failed = moved[0]
    _close_step_runs(failed)
    log_deployment("deployment.finished", failed, duration=_duration(failed))
    emit_finished(failed)
    wake_next(failed)
    return failed


def _close_step_runs(deployment: Deployment) -> None:
    """Settle step runs the runner could not: running ones failed, pending ones skipped."""
    now = timezone.now()
    runs = StepRun.objects.filter(deployment=deployment)
    runs.filter(status=StepStatus.RUNNING).update(status=StepStatus.FAILED, finished_at=now)
    runs.filter(status=StepStatus.PENDING).update(status=StepStatus.SKIPPED)


def _duration(deployment: Deployment) -> float | None:
    return seconds_between(deployment.started_at, deployment.finished_at)


def wake_next(deployment: Deployment) -> None:
    """Wake the oldest deployment waiting on the same (project, environment), if any."""
    waiting = (
        Deployment.objects.filter(
            project_id=deployment.project_id,
            environment=deployment.environment,
            status=S.PENDING,
            job_id__isnull=False,
        )
        .order_by("pk")
        .values_list("job_id", flat=True)
        .first()
    )
    if waiting is not None:
        jobs.job_wake(waiting)
