"""The one place that decides what becomes of a job after a run (jobs.completer writes it).

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

``jobs.completer.finish(decision, job)`` makes it so: one UPDATE fenced on the run (id,
attempt, worker) that also appends the attempt to the job's history; a retry is published
once the change commits; a dead job gets its dead letter in the same transaction.
"""

import enum
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from billiard.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from celery import Task
from celery.utils.time import get_exponential_backoff_interval
from django.utils import timezone

from jobs import attempts, conf
from jobs.errors import Permanent, RetryAfter, Snooze, WorkerShutdown
from jobs.models import Job, JobReason, JobStatus

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
    def returned(cls, result: object) -> "Event":
        return cls(Happened.RETURNED, result=result)

    @classmethod
    def raised(cls, exc: BaseException) -> "Event":
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
    reason: JobReason | None = None  # None: succeeded (a success has no reason)
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


def decide(
    event: Event, job: Job, task: Task | None = None, *, now: datetime | None = None
) -> Decision:
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


def _task(name: str) -> Task | None:
    from project.celery import app

    return app.tasks.get(name)


def _retryable(exc: BaseException | None, task: Task | None) -> bool:
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
