"""Exact job counts by queue, task and status, read from a few small rows.

The triggers (``jobs.accounting.triggers``) append a ``JobCountDelta`` for every change;
``fold()`` moves deltas into the ``JobCount`` totals; ``read()`` returns totals plus the
deltas not folded yet in one statement, so it is exact at any moment, folded or not (one
statement sees one snapshot, and a fold deletes its deltas and adds them to the totals in one
transaction).
"""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, transaction

# Deltas folded per statement: small enough to stay well under a second, large enough that
# a few statements clear a busy minute.
FOLD_BATCH = 5000
# A fold stops after this many batches so a caller's thread (the worker's heartbeat) is never
# held long; the next call carries on.
FOLD_MAX_BATCHES = 20

_POSTGRESQL_FOLD = """
WITH gone AS (
    DELETE FROM jobs_jobcountdelta WHERE id IN (
        SELECT id FROM jobs_jobcountdelta ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
    )
    RETURNING queue, task, status, n
), added AS (
    INSERT INTO jobs_jobcount (queue, task, status, n)
    SELECT queue, task, status, sum(n) FROM gone
    GROUP BY queue, task, status
    ORDER BY queue, task, status
    ON CONFLICT (queue, task, status) DO UPDATE SET n = jobs_jobcount.n + EXCLUDED.n
)
SELECT count(*) FROM gone
"""
_SQLITE_TAKE = """
DELETE FROM jobs_jobcountdelta WHERE id IN (
    SELECT id FROM jobs_jobcountdelta ORDER BY id LIMIT %s
)
RETURNING queue, task, status, n
"""
_SQLITE_ADD = """
INSERT INTO jobs_jobcount (queue, task, status, n) VALUES (%s, %s, %s, %s)
ON CONFLICT (queue, task, status) DO UPDATE SET n = jobs_jobcount.n + excluded.n
"""
_READ = """
SELECT queue, task, status, sum(n) FROM (
    SELECT queue, task, status, n FROM jobs_jobcount
    UNION ALL
    SELECT queue, task, status, n FROM jobs_jobcountdelta
) AS counted
GROUP BY queue, task, status
HAVING sum(n) <> 0
"""


@dataclass(frozen=True)
class FoldResult:
    folded: int
    batches: int


def fold(*, batch: int = FOLD_BATCH, max_batches: int = FOLD_MAX_BATCHES) -> FoldResult:
    """Move pending deltas into the totals, one batch per statement, until none are left.

    Safe from many processes at once: on PostgreSQL each batch takes its deltas with
    ``FOR UPDATE SKIP LOCKED`` (two folds never take the same row); on SQLite the ``DELETE``
    that takes them also takes the database's write lock first.
    """
    return fold_in_batches(
        lambda n: fold_statement(_POSTGRESQL_FOLD, n), _fold_sqlite, batch, max_batches
    )


def fold_in_batches(postgresql, sqlite, batch: int, max_batches: int) -> FoldResult:
    """Call the vendor's ``fold_one(batch)`` until a batch comes back short (or the cap)."""
    fold_one = postgresql if connection.vendor == "postgresql" else sqlite
    folded = batches = 0
    while batches < max_batches:
        moved = fold_one(batch)
        folded += moved
        batches += 1
        if moved < batch:
            break
    return FoldResult(folded=folded, batches=batches)


def fold_statement(sql: str, batch: int) -> int:
    """Run one PostgreSQL fold statement (it answers how many deltas it moved)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [batch])
        return cursor.fetchone()[0]


def _fold_sqlite(batch: int) -> int:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_SQLITE_TAKE, [batch])
        taken = cursor.fetchall()
        summed: dict[tuple[str, str, str], int] = {}
        for queue, task, status, n in taken:
            summed[(queue, task, status)] = summed.get((queue, task, status), 0) + n
        cursor.executemany(_SQLITE_ADD, [(*key, n) for key, n in sorted(summed.items())])
        return len(taken)


def read() -> dict[tuple[str, str, str], int]:
    """Return ``{(queue, task, status): jobs}`` for every combination with jobs, exactly."""
    with connection.cursor() as cursor:
        cursor.execute(_READ)
        return {(queue, task, status): int(n) for queue, task, status, n in cursor.fetchall()}


def by(counts: dict[tuple[str, str, str], int], field: str) -> dict[str, dict[str, int]]:
    """Sum ``counts`` into ``{queue or task: {status: jobs}}`` (``field`` is queue or task)."""
    index = {"queue": 0, "task": 1}[field]
    summed: dict[str, dict[str, int]] = {}
    for key, n in counts.items():
        per = summed.setdefault(key[index], {})
        per[key[2]] = per.get(key[2], 0) + n
    return summed


def by_status(counts: dict[tuple[str, str, str], int], statuses: Iterable[str]) -> dict[str, int]:
    """Sum ``counts`` per status, every one of ``statuses`` present (0 when none)."""
    summed = dict.fromkeys(statuses, 0)
    for (_, _, status), n in counts.items():
        summed[status] = summed.get(status, 0) + n
    return summed
