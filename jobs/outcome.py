"""The one place that decides what becomes of a job after a run, and the one that applies it.

Every path that ends a run comes here: the task when a body returns or raises (alone or in a
batch), the ``task_failure`` handler in a worker's parent process (the child died, or went
past its hard time limit), the reaper (lease expired) and a worker's graceful shutdown.

``decide(event, job, task)`` turns *what happened* into a ``Decision``:

============================  ==========================================================
what happened                 decision (status, reason)
============================  ==========================================================
cancel requested (any event)  cancelled, ``cancelled`` — a cancelled job never runs again
returned                      succeeded
Snooze(seconds)               retrying at now + seconds, ``snoozed``; no attempt spent
worker shutdown               retrying now, ``worker_shutdown``; no attempt spent
Permanent, or an error the    dead, ``permanent``
task does not retry
retryable error               retrying at now + backoff, ``error``; last attempt: dead,
                              ``exhausted``
time limit, worker lost,      retrying at now + backoff with that reason; last attempt:
lease expired                 dead with that reason
============================  ==========================================================

Backoff is Celery's exponential backoff with full jitter, from the task's ``retry_backoff``,
``retry_backoff_max`` and ``retry_jitter``; ``RetryAfter(seconds=…)`` replaces it. Which
errors are retried is the task's ``autoretry_for`` less its ``dont_autoretry_for``.

``apply(decision, job)`` makes it so with one guarded UPDATE fenced on the run (id, attempt,
worker), appending the attempt to the job's history in the same statement; a retry is
published once the change commits; a dead job gets its dead letter in the same transaction.
"""

import enum
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from billiard.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from celery.utils.time import get_exponential_backoff_interval
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from jobs import attempts, conf, statements
from jobs.errors import Permanent, RetryAfter, Snooze
from jobs.models import Job, JobReason, JobStatus
from jobs.publish import publish_on_commit
from jobs.services.base import MAX_ERROR_LENGTH, log_job, this_run
from jobs.transitions import transition

logger = logging.getLogger("jobs")
R = JobReason
S = JobStatus


class Happened(enum.Enum):
    RETURNED = "returned"
    RAISED = "raised"
    TIME_LIMIT = "time_limit"
    WORKER_LOST = "worker_lost"
    LEASE_EXPIRED = "lease_expired"
    WORKER_SHUTDOWN = "worker_shutdown"


@dataclass(frozen=True)
class Event:
    """What happened to one run: a return value, an exception, or the run's loss."""

    kind: Happened
    result: object = None
    exc: BaseException | None = None
    message: str | None = None  # for losses, which have no exception of their own

    @classmethod
    def returned(cls, result) -> "Event":
        return cls(Happened.RETURNED, result=result)

    @classmethod
    def raised(cls, exc: BaseException) -> "Event":
        from jobs.shutdown import WorkerShutdown

        if isinstance(exc, SoftTimeLimitExceeded | TimeLimitExceeded):
            return cls(Happened.TIME_LIMIT, exc=exc)
        if isinstance(exc, WorkerShutdown):
            return cls(Happened.WORKER_SHUTDOWN, exc=exc)
        return cls(Happened.RAISED, exc=exc)

    @classmethod
    def lost(cls, kind: Happened, message: str, exc: BaseException | None = None) -> "Event":
        return cls(kind, exc=exc, message=message)


@dataclass(frozen=True)
class Decision:
    status: JobStatus
    reason: str = ""
    run_after: datetime | None = None
    refund: bool = False  # the attempt is given back (snooze, graceful shutdown)
    error: dict | None = None
    result: object = None

    @property
    def recorded(self) -> bool:
        """Whether the run becomes an entry of the job's history (a snooze does not)."""
        return self.reason != R.SNOOZED


_LOSS_REASONS = {
    Happened.TIME_LIMIT: R.TIME_LIMIT,
    Happened.WORKER_LOST: R.WORKER_LOST,
    Happened.LEASE_EXPIRED: R.LEASE_EXPIRED,
}


def decide(event: Event, job: Job, task=None, *, now: datetime | None = None) -> Decision:
    """Return what becomes of ``job`` (as claimed for this run) after ``event``."""
    now = now or timezone.now()
    exc = event.exc
    error = attempts.error_info(exc, message=event.message)
    if job.cancel_requested_at is not None:
        result = event.result if event.kind is Happened.RETURNED else None
        return Decision(S.CANCELLED, R.CANCELLED, error=error, result=result)
    if event.kind is Happened.RETURNED:
        return Decision(S.SUCCEEDED, result=event.result)
    if event.kind is Happened.WORKER_SHUTDOWN:
        return Decision(S.RETRYING, R.WORKER_SHUTDOWN, run_after=now, refund=True, error=error)
    if isinstance(exc, Snooze):
        until = now + timedelta(seconds=exc.seconds)
        return Decision(S.RETRYING, R.SNOOZED, run_after=until, refund=True)
    task = task or _task(job.task)
    if event.kind is Happened.RAISED and not _retryable(exc, task):
        return Decision(S.DEAD, R.PERMANENT, error=error)
    reason = _LOSS_REASONS.get(event.kind, R.ERROR)
    if job.attempts >= job.max_attempts:
        return Decision(S.DEAD, R.EXHAUSTED if reason == R.ERROR else reason, error=error)
    return Decision(S.RETRYING, reason, run_after=now + _delay(exc, job, task), error=error)


def unrecordable(exc: BaseException) -> Decision:
    """The decision for a run whose own ending could not be recorded: dead, with why."""
    message = f"the run's end could not be recorded: {attempts.error_text(exc)}"
    return Decision(S.DEAD, R.PERMANENT, error=attempts.error_info(exc, message=message))


def _task(name: str):
    from project.celery import app

    return app.tasks.get(name)


def _retryable(exc: BaseException | None, task) -> bool:
    if isinstance(exc, Permanent):
        return False
    if isinstance(exc, RetryAfter):
        return True
    retry_for = getattr(task, "autoretry_for", (Exception,)) or ()
    dont = getattr(task, "dont_autoretry_for", ()) or ()
    return isinstance(exc, tuple(retry_for)) and not isinstance(exc, tuple(dont))


def _delay(exc: BaseException | None, job: Job, task) -> timedelta:
    if isinstance(exc, RetryAfter) and exc.seconds is not None:
        return timedelta(seconds=exc.seconds)
    factor = getattr(task, "retry_backoff", 2)
    seconds = get_exponential_backoff_interval(
        factor=1 if factor is True else int(factor or 0),
        retries=max(0, job.attempts - 1),
        maximum=getattr(task, "retry_backoff_max", None) or conf.get().retry_backoff_max,
        full_jitter=getattr(task, "retry_jitter", True),
    )
    return timedelta(seconds=seconds)


def apply(decision: Decision, job: Job, *, where: Q | None = None) -> Job | None:
    """Apply ``decision`` to the run of ``job``; return the job as it is now, or None.

    None means the run was no longer ``job``'s (the reaper or an operator got there first):
    nothing is changed. ``where`` narrows the guard further (the reaper: lease still expired).
    """
    if decision.status == S.SUCCEEDED:  # the hot path's fixed statement; result is JSON text
        if statements.complete(job, decision.result):
            return job
        return cancelled_meanwhile(decision, job, where)
    guard = this_run(job) & (where or Q())
    if decision.status != S.CANCELLED:  # a cancel asked for meanwhile wins (see below)
        guard &= Q(cancel_requested_at__isnull=True)
    now = timezone.now()
    changes = {"reason": decision.reason, "locked_by": ""}
    if decision.recorded:
        changes["attempts_history"] = attempts.AppendAttempt(
            outcome=decision.status, reason=decision.reason, error=decision.error, finished_at=now
        )
    if decision.error is not None:
        changes["last_error"] = attempts.describe(decision.error)[:MAX_ERROR_LENGTH]
    if decision.status == S.CANCELLED and decision.result is not None:
        changes["result"] = json.loads(decision.result)  # the body returned before it heard
    if decision.status == S.RETRYING:
        changes.update(run_after=decision.run_after, lease_expires_at=None, published_at=now)
        if decision.refund:
            changes["attempts"] = F("attempts") - 1
    with transaction.atomic():
        moved = transition(guard, decision.status, from_=[S.RUNNING], **changes)
        if not moved:
            return cancelled_meanwhile(decision, job, where)
        done = moved[0]
        _announce(done, decision)
    return done


def cancelled_meanwhile(decision: Decision, job: Job, where: Q | None) -> Job | None:
    """End the run ``cancelled`` if a cancel was asked for since it was claimed, else None.

    A cancel request reaches a running body only through its lease keeper or a heartbeat,
    so the run's end may be decided before the body heard of it; the guarded UPDATE then
    finds ``cancel_requested_at`` set, and the run ends cancelled after all, never retried.
    """
    fresh = Job.objects.filter(this_run(job) & (where or Q()), status=S.RUNNING).first()
    if fresh is None or fresh.cancel_requested_at is None:
        log_job("job.outcome_lost", job, status=decision.status, reason=decision.reason)
        return None
    result = decision.result if decision.status == S.SUCCEEDED else None
    cancelled = Decision(S.CANCELLED, R.CANCELLED, error=decision.error, result=result)
    return apply(cancelled, fresh, where=where)


def _announce(job: Job, decision: Decision) -> None:
    """Log the outcome; publish a retry on commit; deliver a dead letter."""
    fields = {"reason": decision.reason, "error": job.last_error[:300]}
    if decision.status == S.RETRYING:
        delay = max(0.0, (job.run_after - timezone.now()).total_seconds())
        event = "job.snoozed" if decision.reason == R.SNOOZED else "job.fail_retry"
        log_job(event, job, delay=round(delay, 3), **fields)
        publish_on_commit([job])
    elif decision.status == S.CANCELLED:
        log_job("job.cancelled", job, **fields)
    elif decision.status == S.DEAD:
        from jobs.services.dead_letters import dead_letter

        dead_letter(job, actor="system")
