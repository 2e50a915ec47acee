"""The worker's hot path as fixed SQL: claim, complete, both in one, and lease renewal.

Each statement is written once per database vendor and only its parameters change per job:
no ORM compilation and no queryset per run. They keep the rules of jobs.transitions (a
claim is ``queued|retrying → running`` and counts the attempt; a completion is ``running →
succeeded`` fenced on the run) and append the attempt to the history in the same statement.
On PostgreSQL the completion of one job and the claim of the next are one statement (two
data-modifying CTEs), so a batch commits each success the moment its body returns without
paying a round trip for it.
"""

from datetime import timedelta
from functools import cache

from django.db import connection
from django.utils import timezone

from jobs import conf
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

_COMPLETE = f"""
UPDATE {TABLE} SET status = '{S.SUCCEEDED}', result = {{json}}, locked_by = '', reason = '',
    lease_expires_at = NULL, updated_at = %s, finished_at = %s, attempts_history = {{append}}
WHERE id = %s AND attempts = %s AND locked_by = %s AND status = '{S.RUNNING}'
    AND cancel_requested_at IS NULL"""

_APPEND = {
    "postgresql": (
        "COALESCE(attempts_history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object("
        "'attempt', attempts, 'worker', locked_by, 'started_at', started_at, "
        f"'finished_at', %s::timestamptz, 'outcome', '{S.SUCCEEDED}', 'reason', '', "
        "'error', NULL))"
    ),
    "sqlite": (
        "json_insert(COALESCE(attempts_history, '[]'), '$[#]', json_object("
        "'attempt', attempts, 'worker', locked_by, 'started_at', started_at, "
        f"'finished_at', %s, 'outcome', '{S.SUCCEEDED}', 'reason', '', 'error', NULL))"
    ),
}
_JSON = {"postgresql": "%s::jsonb", "sqlite": "%s"}


@cache
def _complete_sql(vendor: str) -> str:
    return _COMPLETE.format(json=_JSON[vendor], append=_APPEND[vendor])


@cache
def _complete_and_claim_sql(vendor: str) -> str:
    complete = _complete_sql(vendor).strip() + " RETURNING id"
    return (
        f"WITH done AS ({complete}), claimed AS ({_CLAIM.strip()}) "
        f"SELECT (SELECT count(*) FROM done), claimed.* FROM (SELECT 1) AS one "
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


def _complete_params(job: Job, encoded: str, now) -> list:
    when = connection.ops.adapt_datetimefield_value
    return [encoded, when(now), when(now), when(now), job.pk, job.attempts, job.locked_by]


def claim(job_id: int, *, task: str, worker: str) -> Job | None:
    """Claim a due job of ``task`` for ``worker``; None if it is not claimable."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM, _claim_params(job_id, task, worker, timezone.now()))
        row = cursor.fetchone()
    return _job(row) if row else None


def complete(job: Job, encoded: str) -> bool:
    """Mark the run of ``job`` succeeded with the JSON text ``encoded``; False if it was lost."""
    params = _complete_params(job, encoded, timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(_complete_sql(connection.vendor), params)
        return cursor.rowcount == 1


def complete_and_claim(
    done: Job | None, encoded: str | None, job_id: int, *, task: str, worker: str
):
    """Complete ``done``'s run (if any) and claim ``job_id``: one statement on PostgreSQL.

    Return ``(completed, claimed job or None)``.
    """
    if done is None:
        return False, claim(job_id, task=task, worker=worker)
    if connection.vendor != "postgresql":
        return complete(done, encoded), claim(job_id, task=task, worker=worker)
    now = timezone.now()
    params = _complete_params(done, encoded, now) + _claim_params(job_id, task, worker, now)
    with connection.cursor() as cursor:
        cursor.execute(_complete_and_claim_sql(connection.vendor), params)
        row = cursor.fetchone()
    completed, claimed = row[0] == 1, row[1:]
    return completed, (_job(claimed) if claimed[0] is not None else None)


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
