"""A run's life on a worker: claim, heartbeat, complete, retry later, snooze, wake."""

from datetime import timedelta

from django.db.models import F, Q
from django.utils import timezone

from jobs import conf
from jobs.models import Job
from jobs.publish import publish_on_commit
from jobs.services.base import MAX_ERROR_LENGTH, S, log_job, this_run
from jobs.transitions import transition, update_returning

# Tolerance for a retry message that reaches a worker a moment before its run_after.
CLAIM_CLOCK_SKEW = timedelta(seconds=1)


def job_claim(job_id: int, *, worker: str) -> Job | None:
    """Take a due queued/retrying job for ``worker``: one UPDATE, attempts counted here.

    Returns None when someone else has it, it is finished or it is not due yet.
    """
    now = timezone.now()
    moved = transition(
        Q(pk=job_id, run_after__lte=now + CLAIM_CLOCK_SKEW),
        S.RUNNING,
        attempts=F("attempts") + 1,
        lease_expires_at=now + conf.get().lease_timeout,
        locked_by=worker,
        publish_count=0,
    )
    if not moved:
        return None
    log_job("job.claimed", moved[0], worker=worker)
    return moved[0]


def job_complete(job: Job, result=None) -> Job | None:
    """Mark a running job succeeded; None if its lease was lost to the reaper meanwhile."""
    moved = transition(this_run(job), S.SUCCEEDED, from_=[S.RUNNING], result=result, locked_by="")
    if not moved:
        log_job("job.complete_lost", job)
        return None
    log_job("job.succeeded", moved[0])
    return moved[0]


def job_heartbeat(job: Job) -> Job | None:
    """Extend a running job's lease; return the fresh row, or None if the run was lost."""
    now = timezone.now()
    queryset = Job.objects.filter(this_run(job), status=S.RUNNING)
    rows = update_returning(
        queryset, {"lease_expires_at": now + conf.get().lease_timeout, "updated_at": now}
    )
    return rows[0] if rows else None


def job_retry_later(job: Job, *, error: str, delay: float) -> Job | None:
    """Move a failed run to ``retrying`` after ``delay`` seconds; the caller publishes it."""
    now = timezone.now()
    moved = transition(
        this_run(job),
        S.RETRYING,
        from_=[S.RUNNING],
        run_after=now + timedelta(seconds=delay),
        last_error=error[:MAX_ERROR_LENGTH],
        lease_expires_at=None,
        locked_by="",
        published_at=now,
    )
    if moved:
        log_job("job.fail_retry", moved[0], error=error[:300], delay=round(delay, 3))
    return moved[0] if moved else None


def job_snooze(job: Job, *, seconds: float, reason: str = "") -> Job | None:
    """Put a running job back to wait ``seconds`` without spending an attempt."""
    now = timezone.now()
    moved = transition(
        this_run(job),
        S.RETRYING,
        from_=[S.RUNNING],
        attempts=F("attempts") - 1,
        run_after=now + timedelta(seconds=seconds),
        lease_expires_at=None,
        locked_by="",
        published_at=now,
    )
    if moved:
        log_job("job.snoozed", moved[0], seconds=seconds, reason=reason)
        publish_on_commit(moved)
    return moved[0] if moved else None


def job_wake(job_id: int) -> Job | None:
    """Make a snoozed (``retrying``) job due now and publish it; None if it is not waiting.

    For callers that know the reason a job snoozed is gone (deployments wakes the next
    deployment of an environment when the one before it finishes). A job that is not
    waiting is left alone; a duplicate message is turned away by the claim.
    """
    now = timezone.now()
    rows = update_returning(
        Job.objects.filter(pk=job_id, status=S.RETRYING, run_after__gt=now),
        {"run_after": now, "updated_at": now, "published_at": now},
    )
    if not rows:
        return None
    log_job("job.woken", rows[0])
    publish_on_commit(rows)
    return rows[0]


def job_finish_cancelled(job: Job) -> Job | None:
    """Record that a running job stopped because it was asked to."""
    moved = transition(this_run(job), S.CANCELLED, from_=[S.RUNNING], locked_by="")
    if moved:
        log_job("job.cancelled", moved[0])
    return moved[0] if moved else None
