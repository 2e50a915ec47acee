"""An operator's actions on jobs: cancel, retry and supersede, recorded in the AuditLog."""

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from jobs.errors import IllegalTransition, JobNotFound
from jobs.models import DEAD_LETTER, PENDING, AuditLog, Job, JobReason
from jobs.publish import publish_on_commit
from jobs.services.base import S, log_job
from jobs.signals import job_cancelled
from jobs.transitions import transition, update_returning
from jobs.unique import is_unique_violation


def job_cancel(job_id: int, *, actor: str) -> Job:
    """Cancel a waiting job at once, or ask a running one to stop (``cancel_requested``).

    A waiting job's cancel sends ``job_cancelled`` in the same transaction, so the app that
    owns the job (deployments) can follow.
    """
    with transaction.atomic():
        moved = cancel_waiting(Q(pk=job_id), actor=actor)
        if moved:
            job = moved[0]
        else:
            now = timezone.now()
            rows = update_returning(
                Job.objects.filter(pk=job_id, status=S.RUNNING),
                {"cancel_requested_at": now, "updated_at": now},
            )
            if not rows:
                raise _not_found_or_illegal(job_id, "cancel")
            job = rows[0]
            log_job("job.cancel_requested", job, actor=actor)
        AuditLog.objects.create(
            actor=actor,
            action="job.cancel",
            target_type="job",
            target_id=str(job_id),
            details={"status": job.status},
        )
    return job


def cancel_waiting(where: Q, *, actor: str) -> list[Job]:
    """Cancel the jobs ``where`` selects that have not started (queued, retrying, or a
    workflow's waiting for its dependencies), each with its ``job.cancelled`` line and
    ``job_cancelled`` signal, in the caller's transaction; return them."""
    moved = transition(where, S.CANCELLED, from_=(S.WAITING, *PENDING), reason=JobReason.CANCELLED)
    for job in moved:
        _advance(job)
        log_job("job.cancelled", job, actor=actor)
        job_cancelled.send(sender=Job, job=job, actor=actor)
    return moved


def job_retry(job_id: int, *, actor: str) -> Job:
    """Give a dead or cancelled job a fresh attempt budget and queue it again (a workflow's
    node cancelled before its dependencies ended waits for them again: jobs.workflows.retry)."""
    now = timezone.now()
    try:
        return _retry(job_id, actor=actor, now=now)
    except IntegrityError as exc:
        if not is_unique_violation(exc):
            raise
        # A unique job that died or was cancelled freed its key; a newer job holds it now.
        raise IllegalTransition(
            f"cannot retry job {job_id}: a newer job with its unique key is live"
        ) from None


def _retry(job_id: int, *, actor: str, now) -> Job:
    from jobs.workflows.retry import retried, retry_state

    with transaction.atomic():
        # A workflow's node cancelled before its dependencies ended waits for them again.
        to = retry_state(job_id)
        moved = transition(
            Q(pk=job_id),
            to,
            from_=(S.DEAD, S.CANCELLED) if to == S.QUEUED else (S.CANCELLED,),
            # waiting again: no end to show until it ends (a cancel while waiting left no error)
            **({"reason": ""} if to == S.WAITING else {}),
            attempts=0,
            run_after=now,
            finished_at=None,
            started_at=None,
            cancel_requested_at=None,
            result=None,
            published_at=now,
            publish_count=0,
            superseded_at=None,
        )
        if not moved:
            raise _not_found_or_illegal(job_id, "retry")
        job = retried(moved[0])  # a workflow's node: its inputs, its dependants
        AuditLog.objects.create(
            actor=actor,
            action="job.retry",
            target_type="job",
            target_id=str(job_id),
            details={"task": job.task, "previous_error": job.last_error[:1000]},
        )
        log_job("job.retried", job, actor=actor)
        if job.status == S.QUEUED:
            publish_on_commit([job])
    return job


def job_supersede(job_ids: list[int], *, actor: str) -> int:
    """Mark the dead letters among ``job_ids`` as taken over by a later job; return how many.

    An owner calls it when it replays or retries the work of a dead job with a new job (a
    delivery's replay, a deployment's retry): the dead job stays, for its history, but is
    no longer a dead letter (``jobs.accounting.tallies``). Jobs that are not dead, or already
    superseded, are left alone (one guarded UPDATE). Call inside the owner's transaction.
    """
    ids = [job_id for job_id in job_ids if job_id is not None]
    if not ids:
        return 0
    now = timezone.now()
    superseded = update_returning(
        Job.objects.filter(DEAD_LETTER, pk__in=ids), {"superseded_at": now, "updated_at": now}
    )
    for job in superseded:
        log_job("job.superseded", job, actor=actor)
    return len(superseded)


def _advance(job: Job) -> None:
    """A workflow's job ended: release what it unblocks, in this transaction."""
    if job.workflow_id is not None:
        from jobs.workflows.release import advance  # jobs.workflows imports the services

        advance(job)


def _not_found_or_illegal(job_id: int, action: str) -> Exception:
    status = Job.objects.filter(pk=job_id).values_list("status", flat=True).first()
    if status is None:
        return JobNotFound(f"job {job_id} does not exist")
    return IllegalTransition(f"cannot {action} job {job_id}: it is {status}")
