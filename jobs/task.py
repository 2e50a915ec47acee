"""``JobTask``: the Celery base class that runs Job rows by id.

A message carries one job id, or a list of ids (a batch: see jobs.publish). For each id the
task claims → runs the body → finishes: the claim is one conditional UPDATE (a duplicate
delivery loses and is dropped), the body gets a ``JobContext``, and what happened is decided
by jobs.outcome and written by jobs.completer, the only writer of a run's end. A batch is
claimed a chunk at a time, its successes written together with the next chunk's claim
(jobs.batches). The body's exceptions never leave the task: Celery sees a finished message and
acknowledges it, while the job row says succeeded, retrying, cancelled or dead.

Task options read here: ``autoretry_for`` / ``dont_autoretry_for`` (which errors retry),
``retry_backoff`` / ``retry_backoff_max`` / ``retry_jitter`` (the backoff), and
``job_max_attempts`` (the attempt budget, else ``CONVEYOR_JOB_MAX_ATTEMPTS``), ``unique`` (a
``jobs.unique.Unique`` rule for enqueue), ``limit`` (a ``jobs.limits.Limit``: concurrency,
rates and fairness, kept by jobs.limiter). ``batch =
False`` keeps a task's jobs one per message (long or time-limited work should).

``atomic = True`` runs the body in a database transaction that also records its success: a
worker killed after the body's last write but before the success was recorded leaves no
trace of the run, so its retry cannot repeat the body's database writes. Without it a job is
run at least once: a run lost in that window is run again. Keep atomic bodies short (the
transaction is open while they run) and free of effects outside the database.
"""

import json
import logging
import os
import re
from dataclasses import dataclass, field
from datetime import timedelta

from celery import Task
from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from jobs import (
    batches,
    completer,
    conf,
    limiter,
    limits,
    outcome,
    publish,
    services,
    shutdown,
    statements,
)
from jobs.errors import Permanent, RetryAfter, Snooze
from jobs.lease import keeper
from jobs.models import Job

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
    retry_backoff_max = 0  # 0: CONVEYOR_RETRY_BACKOFF_MAX, read when a retry is decided
    retry_jitter = True
    max_retries = None  # the Job row counts attempts, not the message
    # Default attempt budget for jobs of this task (else CONVEYOR_JOB_MAX_ATTEMPTS).
    job_max_attempts: int | None = None
    # Whether many jobs of this task may share one message (see jobs.publish).
    batch = True
    # Whether the body winds down by itself when its worker shuts down (jobs.shutdown).
    stops_on_shutdown = False
    # Whether the body runs in a database transaction that also records its success, so a
    # body whose work is in the database takes effect exactly once (keep such bodies short).
    atomic = False
    # A jobs.Unique rule: at most one job per key among its states (checked at start-up).
    unique = None
    # A jobs.Limit: how many may run at once, how often they may start, per key (start-up checks).
    limit = None
    # jobs.outcome decides retries from autoretry_for & co; this keeps Celery from also
    # wrapping run() in its own autoretry (it wraps only tasks without ``_orig_run``).
    _orig_run = None

    def __call__(self, job_ids, *args, **kwargs):
        worker = worker_id(self)
        if isinstance(job_ids, list):  # a batch: claimed a chunk at a time (jobs.batches)
            ids = list(dict.fromkeys(_job_id(i) for i in job_ids))
            runner = batches.Runner(self.name, _context, self._run_job, self._ended)
            batches.run(runner, ids, worker=worker, plan=_plan(self, ids[0]))
            return None
        job_id = _job_id(job_ids)
        plan = _plan(self, job_id)
        job = _claim(job_id, task=self, worker=worker, plan=plan)
        if job is None:
            return _dropped(self, job_ids)
        done = self._run_job(job)
        if done is None:
            return None
        # A chain's next step of this task is run here now, as a batch message would (its
        # doorbell owed: rung if this process does not claim it).
        here = publish.batchable(self) and not shutdown.requested()
        follow = self._finish(*done, follow_on=here)
        if follow:
            runner = batches.Runner(self.name, _context, self._run_job, self._ended)
            ids = [each.pk for each in follow]
            batches.run(runner, ids, worker=worker, plan=plan, held=follow)
        return None

    def run_ended(self, job: Job) -> None:
        """Called once a run's end is recorded (not for runs lost with their worker)."""

    def _run_job(self, job: Job, ctx: JobContext | None = None) -> tuple[Job, str] | None:
        """Run the body; return ``(job, encoded result)`` on success, else end the run."""
        ctx = ctx or _context(job)
        lease = keeper()
        lease.track(ctx)
        committed = False
        try:
            if self.atomic:
                encoded, committed = self._run_atomic(ctx)
            else:
                with shutdown.running_body(self.stops_on_shutdown):
                    encoded = _encode(self.run(ctx))
            event = outcome.Event.returned(encoded)
        except BaseException as exc:  # noqa: BLE001 - every failure is the job's, not the pool's
            event = outcome.Event.raised(exc)
        finally:
            lease.untrack(ctx)
        if committed:
            self._ended(job, succeeded=True)
            return None
        if ctx.cancel_requested and job.cancel_requested_at is None:
            job.cancel_requested_at = timezone.now()  # seen by the lease keeper or a heartbeat
        try:
            decision = outcome.decide(event, job, self)
            if decision.status == outcome.S.SUCCEEDED:
                return job, decision.result  # written by the caller, with others (jobs.batches)
            ended = completer.finish(decision, job)
        except DatabaseError:
            raise  # the database is away: the lease runs out and the reaper takes over
        except Exception as exc:  # the ending itself could not be recorded: say why, for good
            ended = completer.finish(outcome.unrecordable(exc), job)
        self._ended(ended, succeeded=ended is not None and ended.status == outcome.S.SUCCEEDED)
        return None

    def _run_atomic(self, ctx: JobContext) -> tuple[str, bool]:
        """Run the body and write its success in one transaction: both happen, or neither.

        Return the encoded result and whether it was committed. A run cancelled or taken
        away meanwhile is rolled back, the body's own writes with it.
        """
        try:
            with transaction.atomic():
                with shutdown.running_body(self.stops_on_shutdown):
                    encoded = _encode(self.run(ctx))
                if ctx.cancel_requested or not completer.succeed(ctx.job, encoded):
                    raise _Undo(encoded)
        except _Undo as undo:
            return undo.encoded, False
        return encoded, True

    def _finish(self, job: Job, encoded: str, *, follow_on: bool = False) -> list[Job]:
        """Write a success (or the cancel that came meanwhile) and tell ``run_ended``.

        ``follow_on``: the caller runs the jobs of this task and queue that the success
        released (a workflow's dependants now queued), returned here, their doorbells not
        rung (jobs.completer's ``released``; rung here if ``run_ended`` raises); else every
        released job's doorbell is rung and none is returned.
        """
        ran = statements.Success(job, encoded, job.started_at, timezone.now())
        released: list[Job] = []
        settled = completer.succeed_many([ran], released=released, ring_released=not follow_on)
        follow = batches.following(released, self.name, job.queue) if follow_on else []
        try:
            for ended, succeeded in settled:
                self._ended(ended, succeeded=succeeded)
        except BaseException:
            batches.ring_owed(follow)
            raise
        return follow

    def _ended(self, job: Job | None, *, succeeded: bool) -> None:
        if job is None:  # the run was taken away: whoever took it ends it
            return
        if succeeded:
            completer.log_success(job)
        self.run_ended(job)

    def apply_async(
        self,
        args=None,
        kwargs=None,
        *,
        priority: int | None = None,
        countdown: float | None = None,
        eta=None,
        queue: str | None = None,
        **options,
    ) -> Job:
        """Enqueue a job of this task (Celery's call style): ``kwargs`` is its payload.

        ``priority`` is the job's priority (−100…100, higher runs first), ``countdown`` or
        ``eta`` its due time, ``queue`` its queue. Returns the Job, written in the caller's
        transaction and published once that commits. Positional arguments are refused: a
        job's payload is one dict.
        """
        if args:
            raise ValueError(f"{self.name}: a job takes its payload as keyword arguments")
        run_after = eta
        if countdown is not None:
            run_after = timezone.now() + timedelta(seconds=float(countdown))
        return services.enqueue(
            self,
            dict(kwargs or {}),
            queue=queue,
            priority=0 if priority is None else priority,
            run_after=run_after,
        )

    def delay(self, *args, **kwargs) -> Job:
        """Enqueue a job of this task whose payload is ``kwargs`` (see ``apply_async``)."""
        return self.apply_async(args, kwargs)

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


def _context(job: Job) -> JobContext:
    return JobContext(job=job, cancel_requested=job.cancel_requested_at is not None)


# A NUL character, as json.dumps writes it (``\u0000`` after an even run of backslashes).
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _encode(result) -> str:
    """The body's return value as JSON text; Permanent if it cannot be stored."""
    try:
        encoded = json.dumps(result, allow_nan=False, ensure_ascii=False)
        encoded.encode("utf-8")  # a lone surrogate cannot be stored
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise Permanent(f"the job's result cannot be stored as JSON: {exc}") from exc
    if "\\u0000" in encoded and _NUL.search(encoded):
        raise Permanent("the job's result contains a NUL character, which cannot be stored")
    return encoded


class _Undo(Exception):  # noqa: N818
    """Rolls back an atomic body whose success could not be written."""

    def __init__(self, encoded: str) -> None:
        super().__init__("the run's success could not be written")
        self.encoded = encoded


def _job_id(value) -> int:
    """A message's job id; anything but a positive integer is refused (and logged)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63:
        return value
    raise ValueError(f"not a job id: {value!r}")


def claim_exactly(job_id: int, *, task: str, worker: str) -> Job | None:
    """Claim job ``job_id`` itself for ``worker`` (if it is runnable), as a message would."""
    from project.celery import app

    plan = _plan(app.tasks.get(task), job_id)
    if plan is not None:
        return limiter.claim(plan, job_id, task=task, worker=worker, only=job_id)
    return statements.claim(job_id, task=task, worker=worker, exact=True)


def _plan(task: Task | None, job_id: int) -> limiter.Plan | None:
    """The limits a claim for ``job_id`` must keep, or None for the free claim.

    A task's own limit is known without a statement; a queue's needs the job's queue, read
    first only when some queue is limited (else the limited claim's lock reads it).
    """
    limit = limits.limit_of(task)
    queue_limits = conf.get().queue_concurrency
    if not queue_limits:  # the usual case: no statement spent on it
        return limiter.Plan(limit=limit) if limit is not None else None
    queue = _reconnecting(statements.queue_of, job_id)
    if queue is None or (limit is None and queue not in queue_limits):
        return None
    return limiter.Plan(queue_limit=queue_limits.get(queue), limit=limit)


def _claim(job_id: int, *, task: Task, worker: str, plan: limiter.Plan | None) -> Job | None:
    """Claim the best runnable job for the message that names ``job_id``."""
    if plan is not None:
        return _reconnecting(limiter.claim, plan, job_id, task=task.name, worker=worker)
    return _reconnecting(statements.claim, job_id, task=task.name, worker=worker)


def _reconnecting(statement, *args, **kwargs):
    """Run ``statement``, reconnecting once if the reused connection died (a restart)."""
    try:
        return statement(*args, **kwargs)
    except (OperationalError, InterfaceError):
        connection.close()
        return statement(*args, **kwargs)


def _dropped(task: Task, job_id) -> None:
    logger.info("job.duplicate_dropped", extra={"job_id": job_id, "task": task.name})
