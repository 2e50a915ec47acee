"""Exact running tallies kept by the database: dead letters and job-time histograms.

The triggers (``jobs.accounting.triggers``) append a ``JobTallyDelta`` whenever a job
enters or leaves the dead letters, or reaches a final state; ``fold()`` moves the deltas
into the ``JobTally`` totals; the reads add totals and the deltas not folded yet in one
statement, so every web process reads the same exact figures, folded or not.

Series:

* ``dead_letters`` — per (queue, task), the dead jobs that no later job took over
  (``superseded_at`` null; ``jobs.services.job_supersede``). A gauge: it goes down when a
  dead letter is retried, superseded or purged.
* ``run_time`` / ``wait_time`` — per (queue, task, bucket), counters of the jobs that reached
  a final state (succeeded, dead, cancelled) after running: run time ``finished_at -
  started_at``, wait ``started_at - run_after`` (the last attempt's), counted once, in the
  statement that ended the job. Never decremented (purging a job does not take it back): a
  Prometheus histogram. ``bucket`` is the index of the first of ``BOUNDS`` the time is
  within, ``len(BOUNDS)`` for above the last; ``total`` sums the seconds.
"""

from dataclasses import dataclass, field

from django.db import connection, transaction

from jobs.accounting.counts import fold_in_batches, fold_statement
from jobs.accounting.rollup import RUN_TIME_BOUNDS

# Upper bounds in seconds of the histogram buckets. Changing them needs a migration that
# empties the histogram rows: a row's bucket is an index into this tuple.
BOUNDS = RUN_TIME_BOUNDS
DEAD_LETTERS, RUN_TIME, WAIT_TIME = "dead_letters", "run_time", "wait_time"
FOLD_BATCH = 5000
FOLD_MAX_BATCHES = 20

_POSTGRESQL_FOLD = """
WITH gone AS (
    DELETE FROM jobs_jobtallydelta WHERE id IN (
        SELECT id FROM jobs_jobtallydelta ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
    )
    RETURNING series, queue, task, bucket, n, total
), added AS (
    INSERT INTO jobs_jobtally (series, queue, task, bucket, n, total)
    SELECT series, queue, task, bucket, sum(n), sum(total) FROM gone
    GROUP BY series, queue, task, bucket
    ORDER BY series, queue, task, bucket
    ON CONFLICT (series, queue, task, bucket) DO UPDATE
    SET n = jobs_jobtally.n + EXCLUDED.n, total = jobs_jobtally.total + EXCLUDED.total
)
SELECT count(*) FROM gone
"""
_SQLITE_TAKE = """
DELETE FROM jobs_jobtallydelta WHERE id IN (
    SELECT id FROM jobs_jobtallydelta ORDER BY id LIMIT %s
)
RETURNING series, queue, task, bucket, n, total
"""
_SQLITE_ADD = """
INSERT INTO jobs_jobtally (series, queue, task, bucket, n, total) VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (series, queue, task, bucket) DO UPDATE
SET n = jobs_jobtally.n + excluded.n, total = jobs_jobtally.total + excluded.total
"""
_READ = """
SELECT series, queue, task, bucket, sum(n), sum(total) FROM (
    SELECT series, queue, task, bucket, n, total FROM jobs_jobtally WHERE series = %s
    UNION ALL
    SELECT series, queue, task, bucket, n, total FROM jobs_jobtallydelta WHERE series = %s
) AS tallied
GROUP BY series, queue, task, bucket
"""


def fold(*, batch: int = FOLD_BATCH, max_batches: int = FOLD_MAX_BATCHES) -> int:
    """Move pending deltas into the totals, one batch per statement; return how many.

    Safe from many processes at once, as ``jobs.accounting.counts.fold`` is.
    """
    return fold_in_batches(
        lambda n: fold_statement(_POSTGRESQL_FOLD, n), _fold_sqlite, batch, max_batches
    ).folded


def _fold_sqlite(batch: int) -> int:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_SQLITE_TAKE, [batch])
        taken = cursor.fetchall()
        summed: dict[tuple, list] = {}
        for series, queue, task, bucket, n, total in taken:
            figures = summed.setdefault((series, queue, task, bucket), [0, 0.0])
            figures[0] += n
            figures[1] += total
        cursor.executemany(
            _SQLITE_ADD, [(*key, n, total) for key, (n, total) in sorted(summed.items())]
        )
        return len(taken)


def _read(series: str) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(_READ, [series, series])
        return cursor.fetchall()


def dead_letters() -> dict[tuple[str, str], int]:
    """Return ``{(queue, task): dead letters}`` for every pair that has some, exactly."""
    return {
        (queue, task): int(n)
        for _, queue, task, _, n, _ in _read(DEAD_LETTERS)
        if n  # a pair whose last dead letter went reads 0
    }


def dead_letters_by_queue() -> dict[str, int]:
    """Return ``{queue: dead letters}`` for every queue that has some."""
    summed: dict[str, int] = {}
    for (queue, _), n in dead_letters().items():
        summed[queue] = summed.get(queue, 0) + n
    return summed


@dataclass
class Histogram:
    """One (queue, task)'s cumulative histogram: ``buckets[i]`` jobs within ``BOUNDS[i]``
    seconds, the last entry every job (+Inf); ``total`` their seconds summed."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS) + 1))
    total: float = 0.0


def histograms(series: str) -> dict[tuple[str, str], Histogram]:
    """Return ``{(queue, task): Histogram}`` of ``run_time`` or ``wait_time``, exactly."""
    found: dict[tuple[str, str], Histogram] = {}
    for _, queue, task, bucket, n, total in _read(series):
        histogram = found.setdefault((queue, task), Histogram())
        histogram.total += float(total)
        for i in range(max(int(bucket), 0), len(BOUNDS) + 1):
            histogram.buckets[i] += int(n)
    return found
