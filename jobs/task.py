"""``JobTask``: the Celery base class that runs Job rows by id.

A message carries one job id, or a list of ids (a batch: see jobs.publish). For each id the
task claims the row (one conditional UPDATE; a duplicate delivery loses and is dropped), runs
the body with a ``JobContext`` and hands what happened to jobs.outcome, which decides and
records the job's fate. A success is written by a fixed statement (jobs.statements); in a
batch it is folded into the claim of the next job, so it is committed the moment its body
returns. The body's exceptions never leave the task: Celery sees a finished message and
acknowledges it, while the job row says succeeded, retrying, cancelled or dead.

Task options read here: ``autoretry_for`` / ``dont_autoretry_for`` (which errors retry),
``retry_backoff`` / ``retry_backoff_max`` / ``retry_jitter`` (the backoff), and
``job_max_attempts`` (the attempt budget, else ``CONVEYOR_JOB_MAX_ATTEMPTS``). ``batch =
False`` keeps a task's jobs one per message (long or time-limited work should).

``atomic = True`` runs the body in a database transaction that also records its success: a
worker killed after the body's last write but before the success was recorded leaves no
trace of the run, so its retry cannot repeat the body's database writes. Without it a job is
run at least once: a run lost in that window is run again. Keep atomic bodies short (the
transaction is open while they run) and free of effects outside the database.
"""

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field

from celery import Task
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from jobs import conf, outcome, services, shutdown, statements
from jobs.errors import Permanent, RetryAfter, Snooze
from jobs.lease import keeper
from jobs.models import PENDING, Job

logger = logging.getLogger("jobs")


@dataclass
class JobContext:
    """What a job body gets: its row, its payload, a heartbeat and the cancel flag."""

    job: Job
    cancel_requested: bool = field(default=False)
    lost: bool = field(default=False)  # the run was taken away (the reaper re-queued it)

    @property
    def payload(self) -> dict:
        return self.job.payload

    def heartbeat(self) -> bool:
        """Extend the lease now; refresh ``cancel_requested``. False if the run was taken away.

        Optional: the worker's lease keeper renews every running job's lease anyway.
        """
        fresh = services.job_heartbeat(self.job)
        if fresh is None:
            self.lost = True
            return False
        self.job.lease_expires_at = fresh.lease_expires_at
        self.cancel_requested = fresh.cancel_requested_at is not None
        return True


def worker_id(task: Task) -> str:
    """Identify this worker process: ``<celery node name>/<pid>``."""
    return f"{task.request.hostname or 'local'}/{os.getpid()}"


class JobTask(Task):
    """Base class for Conveyor's Celery tasks; the body is ``run(self, ctx)``."""

    abstract = True
    ignore_result = True
    acks_late = True
    # Retry anything but the control exceptions; a task may narrow autoretry_for.
    autoretry_for = (Exception,)
    dont_autoretry_for = (Permanent, Snooze)
    retry_backoff = 2
    retry_backoff_max = settings.CONVEYOR_RETRY_BACKOFF_MAX
    retry_jitter = True
    max_retries = None  # the Job row counts attempts, not the message
    # Default attempt budget for jobs of this task (else CONVEYOR_JOB_MAX_ATTEMPTS).
    job_max_attempts: int | None = None
    # Whether many jobs of this task may share one message (see jobs.publish).
    batch = True
    # Whether the body winds down by itself when its worker shuts down (jobs.shutdown).
    stops_on_shutdown = False
    # Whether the body's database writes commit together with its success (see above).
    atomic = False
    # jobs.outcome decides retries from autoretry_for & co; this keeps Celery from also
    # wrapping run() in its own autoretry (it wraps only tasks without ``_orig_run``).
    _orig_run = None

    def __call__(self, job_ids, *args, **kwargs):
        worker = worker_id(self)
        if not isinstance(job_ids, list):
            job = _claim(int(job_ids), worker=worker)
            if job is None:
                return _dropped(self, job_ids)
            done = self._run_job(job)
            if done is not None and _complete(*done):
                self.run_ended(done[0])
            return None
        done = None  # a success whose completion rides on the next claim
        ids = list(dict.fromkeys(int(i) for i in job_ids))
        for position, job_id in enumerate(ids):
            if shutdown.requested():  # leave the rest to other workers, at once
                _republish(ids[position:])
                break
            completed, job = statements.complete_and_claim(
                *(done or (None, None)), job_id, worker=worker
            )
            if done is not None and completed:
                _succeeded(done[0])
                self.run_ended(done[0])
            elif done is not None:
                services.log_job("job.complete_lost", done[0])
            done = None
            if job is None:
                _dropped(self, job_id)
                continue
            done = self._run_job(job)
        if done is not None and _complete(*done):
            self.run_ended(done[0])
        return None

    def run_ended(self, job: Job) -> None:
        """Called once a run's end is recorded (not for runs lost with their worker)."""

    def _run_job(self, job: Job) -> tuple[Job, str] | None:
        """Run the body; return ``(job, encoded result)`` on success, else apply the outcome."""
        ctx = JobContext(job=job, cancel_requested=job.cancel_requested_at is not None)
        self.request.job_context = ctx
        lease = keeper()
        lease.track(ctx)
        completed = False
        try:
            body = transaction.atomic() if self.atomic else contextlib.nullcontext()
            with shutdown.running_body(self.stops_on_shutdown), body:
                result = self.run(ctx)
                try:
                    encoded = json.dumps(result)
                except (TypeError, ValueError) as exc:
                    raise Permanent(f"the job's result cannot be stored as JSON: {exc}") from exc
                if self.atomic and not ctx.cancel_requested and job.cancel_requested_at is None:
                    if not statements.complete(job, encoded):
                        raise _RunTakenAway  # roll the body back: the run is not ours now
                    completed = True
            event = outcome.Event.returned(encoded)
        except _RunTakenAway:
            services.log_job("job.complete_lost", job)
            return None
        except BaseException as exc:  # noqa: BLE001 - every failure is the job's, not the pool's
            event = outcome.Event.raised(exc)
        finally:
            lease.untrack(ctx)
            self.request.job_context = None
        if ctx.cancel_requested and job.cancel_requested_at is None:
            job.cancel_requested_at = timezone.now()  # seen by the lease keeper or a heartbeat
        if completed:  # recorded with the body's writes
            _succeeded(job)
            self.run_ended(job)
            return None
        decision = outcome.decide(event, job, self)
        if decision.status == outcome.S.SUCCEEDED:
            return job, decision.result
        ended = outcome.apply(decision, job)
        if ended is not None:
            self.run_ended(ended)
        return None

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
        """Celery's ``self.retry()`` inside a job body: retry the job (after ``countdown``)."""
        raise RetryAfter(str(exc or "retry requested"), seconds=countdown) from exc


class _RunTakenAway(Exception):
    """An atomic body finished, but its run was no longer this worker's to complete."""


def _claim(job_id: int, *, worker: str) -> Job | None:
    """Claim, reconnecting once if the reused connection died (a database restart)."""
    try:
        return statements.claim(job_id, worker=worker)
    except (OperationalError, InterfaceError):
        connection.close()
        return statements.claim(job_id, worker=worker)


def _complete(job: Job, encoded: str) -> bool:
    if not statements.complete(job, encoded):
        services.log_job("job.complete_lost", job)
        return False
    _succeeded(job)
    return True


def _succeeded(job: Job) -> None:
    if conf.get().log_success:
        services.log_job("job.succeeded", job)


def _republish(job_ids: list[int]) -> None:
    from jobs.publish import publish

    publish(Job.objects.filter(pk__in=job_ids, status__in=PENDING))


def _dropped(task: Task, job_id) -> None:
    logger.info("job.duplicate_dropped", extra={"job_id": job_id, "task": task.name})
