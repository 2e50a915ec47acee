"""Sweeper: re-publish jobs that are due but that no worker has claimed.

The broker is only the doorbell. A message lost in a flushed Redis, a broker that was down
at commit time, or a job scheduled beyond the publish horizon all leave a ``queued`` or
``retrying`` row that nobody will claim. The sweeper finds rows due for longer than
``CONVEYOR_SWEEPER_GRACE`` (default 1m) and publishes them again; a duplicate it causes is
turned away by the claim. Scheduled jobs about to come due are published with their
countdown. A row is re-sent with exponential spacing (grace, 2×grace, 4×grace, …) so a deep
backlog is not multiplied, and not at all while the broker queue already holds enough
messages to carry every candidate for it (a message carries up to ``CONVEYOR_BATCH_SIZE``
ids) — except a job waiting longer than the longest spacing (32 × grace), since those
messages may all be another task's — nor for a paused queue (resuming it rings for its
jobs). Re-sent jobs share messages like any fan-out (jobs.publish).

A candidate whose cancel was asked for is cancelled instead, as an operator's cancel of a
waiting job is (``job.cancelled``, actor ``sweeper``): no claim takes such a row, so a run
given back to the queue just as its cancel was asked for would otherwise wait for ever.
Every way a run ends or is given back cancels it itself; this is the net under all of them.

Both queries read only the columns publishing and logging need (``SWEPT_FIELDS``) from the
partial indexes on the runnable rows (``status IN ('queued', 'retrying')``). The spacing is
decided in SQL, one range of ``job_pending_publish_idx`` (``publish_count, published_at``)
per backoff step and one of ``job_pending_stale_idx`` (``published_at``) for the rows past
the last doubling and those never published, so a steady state (every unclaimed row re-sent
recently enough) reads no rows at all, however deep the backlog; the soon-due rows come from
``job_pending_due_idx``.

Runs every ``CONVEYOR_SWEEPER_INTERVAL`` (default 1m). Logs one ``maintenance.sweeper`` line.
"""

import logging
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone
from kombu.exceptions import ChannelError

from jobs import conf, task_states
from jobs.models import MAX_BACKOFF_DOUBLINGS, PENDING, Job
from jobs.publish import SCHEDULE_HORIZON_SECONDS, broker_errors, publish
from jobs.queues import paused_names
from jobs.services import log_job
from jobs.services.operator import cancel_waiting

logger = logging.getLogger("jobs.maintenance")
BATCH_SIZE = 1000
# A scheduled job is published by the first run after it comes within the publish horizon;
# runs look back this far for such jobs (five runs at the default interval).
COMING_DUE_WINDOW = timedelta(minutes=5)
NOT_FOUND = "404"  # the AMQP reply code of a passive declare of a missing queue
# What publish() (task, queue, run_after), log_job() (task, queue, attempts) and the spacing
# (published_at, publish_count) read; a deferred field read later would cost a query per job.
# priority: the candidates' order, which a UNION can only sort by a selected column.
SWEPT_FIELDS = (
    "task",
    "queue",
    "run_after",
    "attempts",
    "published_at",
    "publish_count",
    "priority",
    "cancel_requested_at",
)


@dataclass(frozen=True)
class SweepResult:
    republished: int = 0
    scheduled: int = 0
    skipped_backlog: int = 0
    skipped_paused: int = 0
    cancelled: int = 0


def _queue_depth(queue: str) -> int | None:
    """Return how many messages wait in broker queue ``queue``, or None if unknown."""
    from project.celery import app

    try:
        with app.connection_for_write() as conn:
            try:
                return conn.default_channel.queue_declare(queue=queue, passive=True).message_count
            except ChannelError as exc:
                # No such queue holds no messages. Redis deletes a queue when it empties, so
                # this is the usual answer there for an idle queue, not a broker problem.
                if str(getattr(exc, "reply_code", "")) == NOT_FOUND:
                    return 0
                raise
    except broker_errors(app) as exc:  # a broker away: plan without its depth; a bug propagates
        logger.warning("sweeper.queue_depth_unknown", extra={"queue": queue, "error": repr(exc)})
        return None


def _candidates(now) -> list[Job]:
    """Return the overdue unclaimed jobs last published longer ago than their spacing.

    The spacing is ``grace × 2^publish_count`` (at most ``2^MAX_BACKOFF_DOUBLINGS``): one
    UNION arm per step, each a range of the partial ``(publish_count, published_at)`` index,
    the last one and the never-published rows' a range of ``job_pending_stale_idx``.
    """
    grace = conf.get().sweeper_grace
    overdue = Job.objects.filter(status__in=PENDING, run_after__lte=now - grace).order_by()
    overdue = overdue.only(*SWEPT_FIELDS)
    arms = [overdue.filter(published_at__isnull=True)]
    for doublings in range(MAX_BACKOFF_DOUBLINGS + 1):
        count = (
            Q(publish_count=doublings)
            if doublings < MAX_BACKOFF_DOUBLINGS
            else Q(publish_count__gte=doublings)
        )
        arms.append(overdue.filter(count, published_at__lte=now - grace * 2**doublings))
    candidates = arms[0].union(*arms[1:], all=True).order_by("-priority", "run_after")
    with _planned_as_small():
        return list(candidates[: BATCH_SIZE * 10])


@contextmanager
def _planned_as_small():
    """Run the candidates' query without JIT compilation or parallel workers (PostgreSQL).

    Its row estimates come from the whole table's statistics (the finished rows have
    ``publish_count`` 0 too), so at millions of rows PostgreSQL expects a large read where
    the partial indexes hold a few rows, and spends more compiling the plan (~60 ms) and
    starting workers (~30 ms) than the reads cost (under 1 ms). Called inside a caller's
    transaction (where SET LOCAL would outlive this query) it changes nothing.
    """
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        yield
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        yield


def sweep() -> SweepResult:
    """Publish overdue unclaimed jobs and soon-due scheduled ones; return the counts."""
    now = timezone.now()
    by_queue: dict[str, list[Job]] = defaultdict(list)
    asked_to_cancel = []
    for job in _candidates(now):
        if job.cancel_requested_at is not None:
            asked_to_cancel.append(job.pk)
        else:
            by_queue[job.queue].append(job)
    republished = skipped = held = 0
    paused = paused_names()
    paused_tasks = task_states.paused_names()
    for queue, jobs in by_queue.items():
        if queue in paused:  # its doorbells would be dropped; resume rings for them
            held += len(jobs)
            continue
        if paused_tasks:  # the same for a paused task's jobs
            jobs = [job for job in jobs if job.task not in paused_tasks]
            held += len(by_queue[queue]) - len(jobs)
            if not jobs:
                continue
        depth = _queue_depth(queue)
        # A message may carry up to CONVEYOR_BATCH_SIZE ids (jobs.publish): a queue still
        # holding that many is a backlog being worked through, not a loss. Not for ever:
        # a doorbell claims only jobs of its own task, and the queue's messages may all be
        # another task's, so a job waiting longer than the longest spacing goes out anyway.
        if depth is not None and depth * conf.get().batch_size >= len(jobs):
            covered_since = now - conf.get().sweeper_grace * 2**MAX_BACKOFF_DOUBLINGS
            waited = [job for job in jobs if (job.published_at or job.run_after) <= covered_since]
            skipped += len(jobs) - len(waited)
            jobs = waited
            if not jobs:
                continue
        jobs = _mark_published(jobs, now)
        for job in jobs:
            log_job("job.swept", job)
        republished += publish(jobs)
    scheduled = _publish_coming_due(now)
    cancelled = _cancel_asked_for(asked_to_cancel)  # after the re-sends, which it must not stop
    result = SweepResult(
        republished=republished,
        scheduled=scheduled,
        skipped_backlog=skipped,
        skipped_paused=held,
        cancelled=cancelled,
    )
    logger.info("maintenance.sweeper", extra=vars(result))
    return result


def _cancel_asked_for(ids: list[int]) -> int:
    """Cancel those of the jobs ``ids`` still waiting with a cancel asked for; return how
    many. A job claimed or moved since it was read is left alone, and so is a row another
    transaction holds (``SKIP LOCKED``, as ``_mark_published``): the next sweep looks again.
    A failure is logged and leaves them for the next sweep."""
    if not ids:
        return 0
    try:
        with transaction.atomic():
            free = Job.objects.select_for_update(skip_locked=True).filter(
                pk__in=ids, status__in=PENDING, cancel_requested_at__isnull=False
            )
            held = list(free.values_list("pk", flat=True))
            return len(cancel_waiting(Q(pk__in=held), actor="sweeper")) if held else 0
    except Exception:  # noqa: BLE001 - one bad row must not stop the next sweeps' re-sends
        logger.exception("sweeper.cancel_failed", extra={"jobs": len(ids)})
        return 0


def _mark_published(jobs: list[Job], now) -> list[Job]:
    """Count a re-send on those of ``jobs`` still waiting to be claimed; return them.

    A job claimed since it was read needs no doorbell, and its row is left alone; so is any
    row another transaction holds (PostgreSQL: ``SKIP LOCKED``): it is being changed (a
    claim, a release, an operator's move), and a sweep that waited for it while holding the
    rows it had already counted could close a circle of waits with that transaction. The
    next sweep looks at it again.
    """
    ids = ", ".join(["%s"] * len(jobs))
    pending = ", ".join(["%s"] * len(PENDING))
    table = Job._meta.db_table
    where = f"id IN ({ids}) AND status IN ({pending})"
    if connection.vendor == "postgresql":
        where = f"id IN (SELECT id FROM {table} WHERE {where} FOR UPDATE SKIP LOCKED)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET published_at = %s, publish_count = publish_count + 1 "
            f"WHERE {where} RETURNING id",  # the ids only: no payload leaves the database
            [connection.ops.adapt_datetimefield_value(now), *(j.pk for j in jobs), *PENDING],
        )
        marked = {row[0] for row in cursor.fetchall()}
    return [job for job in jobs if job.pk in marked]


def _publish_coming_due(now) -> int:
    """Publish scheduled jobs that were beyond the horizon at enqueue and are now within it.

    Only the jobs that crossed into the horizon within the last ``COMING_DUE_WINDOW`` are
    read, so a run costs the same however many jobs wait further inside it. One that crossed
    while the sweeper was stopped for longer is re-sent as overdue once due (``_candidates``).
    """
    horizon = now + timedelta(seconds=SCHEDULE_HORIZON_SECONDS)
    jobs = list(
        Job.objects.filter(
            status__in=PENDING,
            run_after__gt=max(now, horizon - COMING_DUE_WINDOW),
            run_after__lte=horizon,
            published_at__lt=F("run_after") - timedelta(seconds=SCHEDULE_HORIZON_SECONDS),
        )
        .order_by("run_after")
        .only(*SWEPT_FIELDS)[:BATCH_SIZE]
    )
    if jobs:
        _mark_published(jobs, now)
    return publish(jobs)
