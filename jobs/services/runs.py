"""A run's life on a worker: claim, heartbeat, snooze, wake.

How a run ends (succeeded, retrying, cancelled, dead) is decided by jobs.outcome and written
by jobs.completer; the worker's fixed statements live in jobs.statements.
"""

from django.db.models import Q
from django.utils import timezone

from jobs import completer, conf, outcome, statements
from jobs.attempts import error_info
from jobs.models import Job, JobReason
from jobs.publish import publish_on_commit
from jobs.services.base import S, log_job, this_run
from jobs.transitions import update_returning

CLAIM_CLOCK_SKEW = statements.CLAIM_CLOCK_SKEW


def job_claim(job_id: int, *, worker: str) -> Job | None:
    """Claim job ``job_id`` itself for ``worker``: the worker's claim, narrowed to that job.

    For tests and tools that run one job by hand (a worker's message claims the best runnable
    job of the queue instead); the queue's pause and limit apply. None if it is not runnable.
    """
    from jobs.task import claim_exactly  # the task module imports these services

    task = Job.objects.filter(pk=job_id).values_list("task", flat=True).first()
    job = claim_exactly(job_id, task=task, worker=worker) if task else None
    if job is not None:
        log_job("job.claimed", job, worker=worker)
    return job


def job_heartbeat(job: Job) -> Job | None:
    """Extend a running job's lease; return the fresh row, or None if the run was lost."""
    now = timezone.now()
    queryset = Job.objects.filter(this_run(job), status=S.RUNNING)
    rows = update_returning(
        queryset, {"lease_expires_at": now + conf.get().lease_timeout, "updated_at": now}
    )
    return rows[0] if rows else None


def job_snooze(job: Job, *, seconds: float, reason: str = "") -> Job | None:
    """Put a running job back to wait ``seconds`` without spending an attempt."""
    from jobs.errors import Snooze

    decision = outcome.decide(outcome.Event.raised(Snooze(seconds, reason)), job)
    return completer.finish(decision, job)


def job_wake(job_id: int) -> Job | None:
    """Make a snoozed (``retrying``) job due now and publish it; None if it is not waiting.

    For callers that know the reason a job snoozed is gone (deployments wakes the next
    deployment of an environment when the one before it finishes). A job that is not
    waiting is left alone; a duplicate message is turned away by the claim.
    """
    now = timezone.now()
    rows = update_returning(
        Job.objects.filter(Q(pk=job_id, status=S.RETRYING, run_after__gt=now)),
        {"run_after": now, "updated_at": now, "published_at": now},
    )
    if not rows:
        return None
    log_job("job.woken", rows[0])
    publish_on_commit(rows)
    return rows[0]


def job_bury(
    where: Q, *, error: str, reason: JobReason = JobReason.PERMANENT, actor: str = "system"
) -> list[Job]:
    """End the running jobs matching ``where`` ``dead`` with ``error``; return them as now.

    For an operator or a test that ends runs by hand; each goes through jobs.completer like
    any other end, so its dead letter is written in the same transaction as the change.
    """
    decision = outcome.Decision(S.DEAD, reason, error=error_info(None, message=error))
    ended = []
    for job in Job.objects.filter(where, status=S.RUNNING):
        done = completer.finish(decision, job, actor=actor)
        if done is not None:
            ended.append(done)
    return ended
