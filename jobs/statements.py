"""The worker's hot path as fixed SQL: claim, end a run, both in one, and lease renewal.

A message is a doorbell: its claim takes the best runnable job of the named job's queue and
of the message's task (``_PICK``), which may be another job than the one named, and none
while the queue is paused (jobs.queues).

Each statement is written once per database vendor and only its parameters change per job:
no ORM compilation and no queryset per run. They keep the rules of jobs.transitions (a
claim is ``queued|retrying → running`` and counts the attempt; an end is ``running → …``
fenced on the run: id, attempt and worker) and append the attempt to the history in the
same statement (jobs.attempts.append_sql, the one history builder). jobs.completer is the
only caller of the end statements. On PostgreSQL the success of one job and the claim of
the next are one statement (two data-modifying CTEs), so a batch commits each success the
moment its body returns without paying a round trip for it.
"""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from django.db import connection, transaction
from django.utils import timezone

from jobs import conf
from jobs.attempts import append_sql
from jobs.models import Job, JobStatus, QueueState

S = JobStatus
TABLE = Job._meta.db_table
FIELDS = Job._meta.concrete_fields
COLUMNS = ", ".join(connection.ops.quote_name(field.column) for field in FIELDS)
NAMES = [field.attname for field in FIELDS]
# Tolerance for a retry message that reaches a worker a moment before its run_after.
CLAIM_CLOCK_SKEW = timedelta(seconds=1)

# The claim: the best runnable job(s) of the queue of the job a message names, of the
# message's task: highest priority first, then due time, then id; rows another claim holds
# are skipped. The queue comes from the named job, so a message needs no queue of its own.
# The queue's state row is read under FOR KEY SHARE: a pause takes FOR UPDATE on it, so it
# waits for the claims under way to commit, and a claim that comes after it waits for the
# pause and then reads the row as the pause left it (READ COMMITTED re-reads a locked row).
# A queue with a concurrency limit is never claimed this way but by ``claim_limited``.
STATE_TABLE = QueueState._meta.db_table
_TARGET = {
    "postgresql": {
        "named": f"target AS MATERIALIZED (SELECT queue FROM {TABLE} WHERE id = %s)",
        "given": "target AS MATERIALIZED (SELECT %s::varchar AS queue)",
    },
    "sqlite": {
        "named": f"target AS (SELECT queue FROM {TABLE} WHERE id = %s)",
        "given": "target AS (SELECT %s AS queue)",
    },
}
_STATE = {
    "postgresql": (
        f"state AS MATERIALIZED (SELECT paused_at FROM {STATE_TABLE} "
        "WHERE name = (SELECT queue FROM target) {lock})"
    ),
    "sqlite": (
        f"state AS (SELECT paused_at FROM {STATE_TABLE} WHERE name = (SELECT queue FROM target))"
    ),
}
_NOT_LIMITED = {
    "postgresql": "AND (SELECT queue FROM target) <> ALL(%s::varchar[])",
    "sqlite": "AND (SELECT queue FROM target) NOT IN (SELECT value FROM json_each(%s))",
}
_RUNNING = (
    f"(SELECT count(*) FROM {TABLE} "
    f"WHERE queue = (SELECT queue FROM target) AND status = '{S.RUNNING}')"
)
_LIMIT = {"free": "%s", "limited": f"MAX(0, MIN(%s, %s - {_RUNNING}))"}
_PG_LIMIT = {"free": "%s", "limited": f"GREATEST(0, LEAST(%s, %s - {_RUNNING}))"}
_PICK = f"""
SELECT id FROM {TABLE}
WHERE queue = (SELECT queue FROM target) AND task = %s
    AND status IN ('{S.QUEUED}', '{S.RETRYING}') AND run_after <= %s
    AND cancel_requested_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM state WHERE paused_at IS NOT NULL) {{exclude}} {{only}}
ORDER BY priority DESC, run_after, id
LIMIT {{limit}}"""
_SET_RUNNING = f"""
UPDATE {TABLE} SET status = '{S.RUNNING}', attempts = attempts + 1, lease_expires_at = %s,
    locked_by = %s, publish_count = 0, updated_at = %s, started_at = %s"""


@cache
def _claim_parts(vendor: str, limited: bool, exact: bool = False) -> tuple[str, str]:
    """Return the claim's CTEs and its UPDATE, for a free queue or a limited one.

    ``exact`` claims only the named job (``jobs.services.job_claim``: tools and tests).
    """
    postgres = vendor == "postgresql"
    target = _TARGET[vendor]["given" if limited else "named"]
    # A limited claim already holds the row FOR UPDATE (``claim_limited``).
    state = _STATE[vendor].replace("{lock}", "" if limited else "FOR KEY SHARE")
    limit = (_PG_LIMIT if postgres else _LIMIT)["limited" if limited else "free"]
    exclude = "" if limited else _NOT_LIMITED[vendor]
    pick = _PICK.format(exclude=exclude, only="AND id = %s" if exact else "", limit=limit).strip()
    if postgres:
        where = f"WHERE id = ANY(ARRAY({pick} FOR UPDATE SKIP LOCKED))"
    else:
        where = f"WHERE id IN ({pick})"
    return f"{target}, {state}", f"{_SET_RUNNING.strip()} {where} RETURNING {COLUMNS}"


@cache
def _claim_sql(vendor: str, limited: bool = False, exact: bool = False) -> str:
    ctes, update = _claim_parts(vendor, limited, exact)
    return f"WITH {ctes} {update}"


# Every way a run ends, as one fenced UPDATE; a NULL parameter leaves its column as it was.
# A cancel ends only a run whose cancel was asked for; any other ending is refused by one.
_END = f"""
UPDATE {TABLE} SET status = %s, reason = %s, locked_by = '', lease_expires_at = NULL,
    result = COALESCE({{json}}, result), last_error = COALESCE({{text}}, last_error),
    run_after = COALESCE({{when}}, run_after), published_at = COALESCE({{when}}, published_at),
    attempts = attempts - {{int}}, updated_at = %s, finished_at = COALESCE({{when}}, finished_at),
    attempts_history = CASE WHEN {{flag}} THEN {{append}} ELSE attempts_history END
WHERE id = %s AND attempts = %s AND locked_by = %s AND status = '{S.RUNNING}'
    AND (cancel_requested_at IS NOT NULL) = {{flag}}
    AND ({{when}} IS NULL OR lease_expires_at < {{when}})"""

_CASTS = {
    "postgresql": {
        "json": "%s::jsonb",
        "text": "%s::text",
        "when": "%s::timestamptz",
        "int": "%s::integer",
        "flag": "%s::boolean",
    },
    "sqlite": {"json": "%s", "text": "%s", "when": "%s", "int": "%s", "flag": "%s"},
}


@dataclass(frozen=True)
class Ending:
    """The column values one run's end writes (see jobs.completer, which builds them)."""

    status: str
    reason: str = ""
    result: str | None = None  # JSON text, or None to keep the column
    last_error: str | None = None
    run_after: datetime | None = None  # a retry's due time (also its publish time)
    refund: bool = False  # give the attempt back
    recorded: bool = True  # append the attempt to the history
    error: dict | None = None  # the history entry's error
    cancels: bool = False  # the cancel asked for; any other ending is refused by one
    lease_expired_before: datetime | None = None  # the reaper's guard


@cache
def _end_sql(vendor: str) -> str:
    return _END.format(append=append_sql(vendor), **_CASTS[vendor])


@cache
def _end_and_claim_sql(vendor: str) -> str:
    return (
        f"WITH done AS ({_end_sql(vendor).strip()} RETURNING id), "
        f"{_claim_parts(vendor, False)[0]}, claimed AS ({_claim_parts(vendor, False)[1]}) "
        "SELECT (SELECT count(*) FROM done), claimed.* FROM (SELECT 1) AS one "
        "LEFT JOIN claimed ON true"
    )


@cache
def _converters(vendor: str) -> list:
    """Per column, the functions that turn a raw value into the field's Python value."""
    found = []
    for field in FIELDS:
        column = field.get_col(TABLE)
        funcs = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        found.append((column, funcs))
    return found


def _job(row) -> Job:
    values = []
    for value, (column, funcs) in zip(row, _converters(connection.vendor), strict=True):
        for func in funcs:
            value = func(value, column, connection)
        values.append(value)
    return Job.from_db("default", NAMES, values)


def _limited_names() -> object:
    names = sorted(conf.get().queue_concurrency)
    return names if connection.vendor == "postgresql" else json.dumps(names)


def _claim_params(job_id: int, task: str, worker: str, now, count: int = 1) -> list:
    when = connection.ops.adapt_datetimefield_value
    lease = now + conf.get().lease_timeout
    due = when(now + CLAIM_CLOCK_SKEW)
    return [job_id, when(lease), worker, when(now), when(now), task, due, _limited_names(), count]


def _end_params(job: Job, ending: Ending, now) -> list:
    when = connection.ops.adapt_datetimefield_value
    final = ending.status in (S.SUCCEEDED, S.DEAD, S.CANCELLED)
    expired = when(ending.lease_expired_before)
    error = json.dumps(ending.error) if ending.error is not None else None
    return [
        ending.status,
        ending.reason,
        ending.result,
        ending.last_error,
        when(ending.run_after),
        when(now if ending.run_after is not None else None),
        int(ending.refund),
        when(now),
        when(now if final else None),
        ending.recorded,
        when(now),
        ending.status,
        ending.reason,
        error,
        job.pk,
        job.attempts,
        job.locked_by,
        ending.cancels,
        expired,
        expired,
    ]


def claim(job_id: int, *, task: str, worker: str, exact: bool = False) -> Job | None:
    """Claim the best runnable job of ``task`` in ``job_id``'s queue; None if there is none.

    ``exact``: claim job ``job_id`` itself or nothing.
    """
    with connection.cursor() as cursor:
        params = _claim_params(job_id, task, worker, timezone.now())
        if exact:
            params.insert(-1, job_id)
        cursor.execute(_claim_sql(connection.vendor, False, exact), params)
        row = cursor.fetchone()
    return _job(row) if row else None


def claim_limited(
    queue: str, limit: int, *, task: str, worker: str, only: int | None = None
) -> Job | None:
    """Claim the best runnable job of ``task`` in ``queue`` if fewer than ``limit`` run there.

    Exact across every worker: the queue's state row is locked first (FOR UPDATE, so claims
    of the queue take turns), then the claim counts the running rows in a statement of its
    own, which sees every claim committed before the lock was granted.
    """
    now = timezone.now()
    when = connection.ops.adapt_datetimefield_value
    lease = now + conf.get().lease_timeout
    params = [queue, when(lease), worker, when(now), when(now), task]
    params += [when(now + CLAIM_CLOCK_SKEW), *([only] if only is not None else []), 1, limit]
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            lock = f"SELECT 1 FROM {STATE_TABLE} WHERE name = %s FOR UPDATE"
            cursor.execute(lock, [queue])
            if cursor.fetchone() is None:  # no row yet: make it, then take its lock
                cursor.execute(
                    f"INSERT INTO {STATE_TABLE} (name, paused_by, updated_at) "
                    "VALUES (%s, '', %s) ON CONFLICT (name) DO NOTHING",
                    [queue, when(now)],
                )
                cursor.execute(lock, [queue])
        cursor.execute(_claim_sql(connection.vendor, True, only is not None), params)
        row = cursor.fetchone()
    return _job(row) if row else None


def queue_of(job_id: int) -> str | None:
    """Return the queue of job ``job_id`` (None if it is gone)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT queue FROM {TABLE} WHERE id = %s", [job_id])
        row = cursor.fetchone()
    return row[0] if row else None


def end(job: Job, ending: Ending) -> Job | None:
    """End the run of ``job`` as ``ending`` says; return the row as it is now, or None.

    None: the run is no longer ``job``'s, or a cancel was asked for meanwhile (unless the
    ending is the cancel), or the reaper's lease guard no longer holds.
    """
    params = _end_params(job, ending, timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(f"{_end_sql(connection.vendor)} RETURNING {COLUMNS}", params)
        row = cursor.fetchone()
    return _job(row) if row else None


def end_and_claim(done: Job, ending: Ending, job_id: int, *, task: str, worker: str):
    """End ``done``'s run and claim ``job_id``: one statement on PostgreSQL.

    Return ``(ended, claimed job or None)``; ``ended`` says whether the end was written.
    """
    if connection.vendor != "postgresql":  # SQLite has no UPDATE inside WITH
        return end(done, ending) is not None, claim(job_id, task=task, worker=worker)
    now = timezone.now()
    params = _end_params(done, ending, now) + _claim_params(job_id, task, worker, now)
    with connection.cursor() as cursor:
        cursor.execute(_end_and_claim_sql(connection.vendor), params)
        row = cursor.fetchone()
    ended, claimed = row[0] == 1, row[1:]
    return ended, (_job(claimed) if claimed[0] is not None else None)


def renew_leases(job_ids: list[int], *, worker: str) -> dict[int, bool]:
    """Extend the leases of ``worker``'s running jobs; return ``{id: cancel requested}``.

    A job missing from the answer is no longer this worker's run.
    """
    if not job_ids:
        return {}
    now = timezone.now()
    when = connection.ops.adapt_datetimefield_value
    marks = ", ".join(["%s"] * len(job_ids))
    sql = (
        f"UPDATE {TABLE} SET lease_expires_at = %s, updated_at = %s "
        f"WHERE id IN ({marks}) AND locked_by = %s AND status = '{S.RUNNING}' "
        "RETURNING id, cancel_requested_at"
    )
    lease = now + conf.get().lease_timeout
    with connection.cursor() as cursor:
        cursor.execute(sql, [when(lease), when(now), *job_ids, worker])
        return {row[0]: row[1] is not None for row in cursor.fetchall()}
