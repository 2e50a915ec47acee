"""``JobTask``: the Celery base class that runs a Job row by its id.

The message carries only the job id. ``__call__`` claims the row (one conditional UPDATE;
a duplicate delivery loses and is dropped), runs the body with a ``JobContext`` and marks the
row succeeded. Retries go through Celery's ``autoretry_for`` with exponential backoff and full
jitter, but the Job row decides: ``retry()`` moves it to ``retrying`` or, once its attempts are
spent, lets the error through to the ``task_failure`` dead-letter handler.
"""

import logging
import os
import threading
from dataclasses import dataclass, field

from celery import Task
from celery.exceptions import Retry
from django.conf import settings
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
)

from jobs import conf, services
from jobs.errors import Permanent, Snooze
from jobs.models import Job

logger = logging.getLogger("jobs")


@dataclass
class JobContext:
    """What a job body gets: its row, its payload, a heartbeat and the cancel flag."""

    job: Job
    cancel_requested: bool = field(default=False)

    @property
    def payload(self) -> dict:
        return self.job.payload

    def heartbeat(self) -> bool:
        """Extend the lease; refresh ``cancel_requested``. False if the run was taken away."""
        fresh = services.job_heartbeat(self.job)
        if fresh is None:
            return False
        self.job.lease_expires_at = fresh.lease_expires_at
        self.cancel_requested = fresh.cancel_requested_at is not None
        return True


class LeaseKeeper(threading.Thread):
    """Renew a running job's lease every third of the lease, until the body returns.

    A body that never calls ``ctx.heartbeat()`` still keeps its lease, so the reaper only
    recovers jobs whose worker is really gone. Uses its own database connection.
    """

    def __init__(self, job: Job) -> None:
        super().__init__(name=f"lease-{job.pk}", daemon=True)
        self.job = job
        self.stopped = threading.Event()

    def run(self) -> None:
        interval = conf.get().lease_timeout.total_seconds() / 3
        try:
            while not self.stopped.wait(interval):
                try:
                    if services.job_heartbeat(self.job) is None:
                        return  # the run was taken away; nothing more to keep
                except DatabaseError as exc:
                    logger.warning(
                        "job.lease_renewal_failed",
                        extra={"job_id": self.job.pk, "error": repr(exc)},
                    )
                    close_old_connections()
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)


def worker_id(task: Task) -> str:
    """Identify this worker process: ``<celery node name>/<pid>``."""
    return f"{task.request.hostname or 'local'}/{os.getpid()}"


class JobTask(Task):
    """Base class for Conveyor's Celery tasks; the body is ``run(self, ctx)``."""

    abstract = True
    ignore_result = True
    acks_late = True
    # Retry anything but the two control exceptions; a task may narrow autoretry_for.
    autoretry_for = (Exception,)
    dont_autoretry_for = (Permanent, Snooze)
    retry_backoff = 2
    retry_backoff_max = settings.CONVEYOR_RETRY_BACKOFF_MAX
    retry_jitter = True
    max_retries = None  # the Job row counts attempts, not the message
    # Default attempt budget for jobs of this task (else CONVEYOR_JOB_MAX_ATTEMPTS).
    job_max_attempts: int | None = None

    def __call__(self, job_id, *args, **kwargs):
        job = _claim(int(job_id), worker=worker_id(self))
        if job is None:
            logger.info("job.duplicate_dropped", extra={"job_id": job_id, "task": self.name})
            return None
        ctx = JobContext(job=job, cancel_requested=job.cancel_requested_at is not None)
        self.request.job_context = ctx
        keeper = LeaseKeeper(job)
        keeper.start()
        try:
            result = self.run(ctx)
        except Snooze as snooze:
            services.job_snooze(job, seconds=snooze.seconds, reason=str(snooze))
            return None
        finally:
            keeper.stop()
        if ctx.cancel_requested:
            services.job_finish_cancelled(job)
        else:
            services.job_complete(job, result)
        return result

    def retry(
        self,
        args=None,
        kwargs=None,
        exc=None,
        throw=True,
        eta=None,
        countdown=None,
        max_retries=None,
        **options,
    ):
        """Record the retry on the Job row first; past its budget, fail for good instead."""
        ctx = getattr(self.request, "job_context", None)
        if ctx is None:  # called outside __call__ (eagerly, or by hand)
            return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)
        job = ctx.job
        if job.attempts >= job.max_attempts:
            raise exc if exc is not None else Permanent("attempts exhausted")
        delay = float(countdown or 0)
        moved = services.job_retry_later(job, error=_describe(exc), delay=delay)
        if moved is None:  # the reaper took the run away meanwhile; nothing is ours to retry
            raise Retry("run lost", exc, delay)
        return super().retry(args, kwargs, exc, throw, eta, delay, max_retries=None, **options)


def _claim(job_id: int, *, worker: str) -> Job | None:
    """Claim, reconnecting once if the reused connection died (a database restart)."""
    try:
        return services.job_claim(job_id, worker=worker)
    except (OperationalError, InterfaceError):
        connection.close()
        return services.job_claim(job_id, worker=worker)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "retry requested"
    return f"{exc.__class__.__name__}: {exc}"
