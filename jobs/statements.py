"""The worker's hot path as fixed SQL: claim, end a run, both in one, and lease renewal.

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

from django.db import connection
from django.utils import timezone

from jobs import conf
from jobs.attempts import append_sql
from jobs.models import Job, JobStatus

S = JobStatus
TABLE = Job._meta.db_table
FIELDS = Job._meta.concrete_fields
COLUMNS = ", ".join(connection.ops.quote_name(field.column) for field in FIELDS)
NAMES = [field.attname for field in FIELDS]
# Tolerance for a retry message that reaches a worker a moment before its run_after.
CLAIM_CLOCK_SKEW = timedelta(seconds=1)

_CLAIM = f"""
UPDATE {TABLE} SET status = '{S.RUNNING}', attempts = attempts + 1, lease_expires_at = %s,
    locked_by = %s, publish_count = 0, updated_at = %s, started_at = %s
WHERE id = %s AND task = %s AND status IN ('{S.QUEUED}', '{S.RETRYING}') AND run_after <= %s
    AND cancel_requested_at IS NULL
RETURNING {COLUMNS}"""

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
        f"claimed AS ({_CLAIM.strip()}) "
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


def _claim_params(job_id: int, task: str, worker: str, now) -> list:
    when = connection.ops.adapt_datetimefield_value
    lease = now + conf.get().lease_timeout
    return [when(lease), worker, when(now), when(now), job_id, task, when(now + CLAIM_CLOCK_SKEW)]


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


def claim(job_id: int, *, task: str, worker: str) -> Job | None:
    """Claim a due job of ``task`` for ``worker``; None if it is not claimable."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM, _claim_params(job_id, task, worker, timezone.now()))
        row = cursor.fetchone()
    return _job(row) if row else None


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
