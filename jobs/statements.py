"""The worker's hot path as fixed SQL: claim, end a run, both in one, and lease renewal.

A message is a doorbell: its claim takes the best runnable job of the named job's queue and
of the message's task (``_PICK``), which may be another job than the one named, and none
while the queue or the task is paused (jobs.queues). Limited queues and tasks are claimed by
jobs.limiter instead.

Each statement is written once per database vendor and only its parameters change per job:
no ORM compilation and no queryset per run. They keep the rules of jobs.transitions (a
claim is ``queued|retrying → running`` and counts the attempt; an end is ``running → …``
fenced on the run: id, attempt and worker) and append the attempt to the history in the
same statement (jobs.attempts.append_sql, the one history builder). jobs.completer is the
only caller of the end statements. On PostgreSQL the success of one job and the claim of
the next are one statement (two data-modifying CTEs), so a batch commits each success the
moment its body returns without paying a round trip for it; a chunk of successes (jobs.batches)
is one UPDATE over arrays, written with the claim of the next chunk.
"""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from django.db import connection
from django.utils import timezone

from jobs import conf, prepared
from jobs.attempts import append_sql
from jobs.models import Job, JobReason, JobStatus, QueueState, TaskState

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
# The queue's and the task's state rows are read under FOR KEY SHARE: a pause takes FOR
# UPDATE on one, so it waits for the claims under way to commit, and a claim that comes
# after it waits for the pause and then reads the row as the pause left it (READ COMMITTED
# re-reads a locked row). A limited queue or task is never claimed this way but by
# jobs.limiter, whose claims take turns on its state rows.
STATE_TABLE = QueueState._meta.db_table
TASK_STATE_TABLE = TaskState._meta.db_table
_CTES = {
    "postgresql": (
        f"target AS MATERIALIZED (SELECT queue FROM {TABLE} WHERE id = %s), "
        f"state AS MATERIALIZED (SELECT paused_at FROM {STATE_TABLE} "
        "WHERE name = (SELECT queue FROM target) FOR KEY SHARE), "
        f"task_state AS MATERIALIZED (SELECT paused_at FROM {TASK_STATE_TABLE} "
        "WHERE name = %s FOR KEY SHARE)"
    ),
    "sqlite": (
        f"target AS (SELECT queue FROM {TABLE} WHERE id = %s), "
        f"state AS (SELECT paused_at FROM {STATE_TABLE} WHERE name = (SELECT queue FROM target)), "
        f"task_state AS (SELECT paused_at FROM {TASK_STATE_TABLE} WHERE name = %s)"
    ),
}


def runnable(alias: str) -> str:
    """The condition on ``alias``'s row that makes it a job a claim may take (its one
    parameter: the latest due time, the clock skew allowed): the plain claim's pick, the
    limited ones' (jobs.limiter, jobs.claim_at_once) and the refusal mark's check."""
    return (
        f"{alias}.status IN ('{S.QUEUED}', '{S.RETRYING}') AND {alias}.run_after <= %s "
        f"AND {alias}.cancel_requested_at IS NULL"
    )


_NOT_LIMITED = {
    "postgresql": "AND (SELECT queue FROM target) <> ALL(%s::varchar[])",
    "sqlite": "AND (SELECT queue FROM target) NOT IN (SELECT value FROM json_each(%s))",
}
_PICK = f"""
SELECT j.id FROM {TABLE} j
WHERE j.queue = (SELECT queue FROM target) AND j.task = %s AND {runnable("j")}
    AND NOT EXISTS (SELECT 1 FROM state WHERE paused_at IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM task_state WHERE paused_at IS NOT NULL) {{exclude}} {{only}}
ORDER BY priority DESC, run_after, id
LIMIT %s"""


def several_per_message() -> bool:
    """Whether one query string may carry several statements: PostgreSQL with psycopg's
    client-side binding (Django's default); ``server_side_binding`` prepares each message,
    which allows one statement."""
    if connection.vendor != "postgresql":
        return False
    return not connection.settings_dict.get("OPTIONS", {}).get("server_side_binding")


# A limited claim's lock (jobs.limiter): the queue's state row (FOR UPDATE if the queue has
# a concurrency limit, else FOR KEY SHARE, as a pause expects) and the task's (FOR UPDATE),
# read with the job's queue, the pause, the task's rate window and the refusal marks.
# ``queue``: the expression that answers the queue (jobs.claim_at_once hands it on).
@cache
def limited_lock_sql(vendor: str, exclusive_queue: bool, queue: str = "j.queue") -> str:
    lock = ""
    if vendor == "postgresql":
        lock = f"FOR {'UPDATE' if exclusive_queue else 'KEY SHARE'} OF q FOR UPDATE OF t"
    return (
        f"SELECT {queue}, q.paused_at IS NOT NULL OR t.paused_at IS NOT NULL, t.starts, "
        "q.held_at IS NOT NULL, t.held_at IS NOT NULL "
        f"FROM {TABLE} j JOIN {STATE_TABLE} q ON q.name = j.queue "
        f"JOIN {TASK_STATE_TABLE} t ON t.name = %s WHERE j.id = %s {lock}"
    )


# A claim's UPDATE, its lease's end and its time to fill in (then the worker, a parameter).
SET_RUNNING_AT = (
    f"UPDATE {TABLE} SET status = '{S.RUNNING}', attempts = attempts + 1, "
    "lease_expires_at = {lease}, locked_by = %s, publish_count = 0, updated_at = {at}, "
    "started_at = {at}"
)
SET_RUNNING = SET_RUNNING_AT.format(lease="%s", at="%s")
# On PostgreSQL a claim is stamped with the database's clock as the claim runs, never
# earlier than the worker's own reading (``CLOCK``'s one parameter): a run that ended before
# the claim could see the job it released ended before this one started, where the worker's
# clock, read before the message left, could put the start first. Across hosts this holds
# as far as their clocks agree (NTP); a database clock ahead of the worker's lengthens the
# lease by that much. ``SET_RUNNING`` stamps the worker's clock instead: on SQLite, whose
# writes take turns, and in jobs.limiter's claim, which reads it after its lock (a rate's
# window counts that same time). ``SET_RUNNING_BY_CLOCK``'s parameters: the lease's length,
# then the worker.
CLOCK = "clock AS MATERIALIZED (SELECT GREATEST(%s::timestamptz, clock_timestamp()) AS at)"
SET_RUNNING_BY_CLOCK = SET_RUNNING_AT.format(
    lease="(SELECT at FROM clock) + %s", at="(SELECT at FROM clock)"
)


@cache
def _claim_parts(vendor: str, exact: bool = False, one: bool = False) -> tuple[str, str]:
    """Return the claim's CTEs and its UPDATE.

    ``exact`` claims only the named job (``jobs.services.job_claim``: tools and tests).
    ``one``: at most one job (its count parameter is 1), found by its primary key whatever
    the table's statistics say. A cached generic plan of ``id = ANY(…)`` expects about ten
    ids and, planned while the table was small or just truncated, scans the whole table for
    them until the next ``ANALYZE``; ``id = (…)`` is one row, always the index.
    """
    pick = _PICK.format(exclude=_NOT_LIMITED[vendor], only="AND id = %s" if exact else "")
    if vendor != "postgresql":
        where = f"WHERE id IN ({pick.strip()})"
        return _CTES[vendor], f"{SET_RUNNING} {where} RETURNING {COLUMNS}"
    if one:
        where = f"WHERE id = ({pick.strip()} FOR UPDATE SKIP LOCKED)"
    else:
        where = f"WHERE id = ANY(ARRAY({pick.strip()} FOR UPDATE SKIP LOCKED))"
    ctes = f"{_CTES[vendor]}, {CLOCK}"
    return ctes, f"{SET_RUNNING_BY_CLOCK} {where} RETURNING {COLUMNS}"


@cache
def _claim_sql(vendor: str, exact: bool = False, one: bool = False) -> str:
    ctes, update = _claim_parts(vendor, exact, one)
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

    status: JobStatus
    reason: JobReason | None = None  # written as '' when None
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


# A chunk's successes: one UPDATE joined to arrays of (id, attempt, worker, result, start,
# end), fenced per run as ``_END`` is; each row keeps the times its body really ran.
_SUCCESSES = f"""
UPDATE {TABLE} SET status = '{S.SUCCEEDED}', reason = '', locked_by = '',
    lease_expires_at = NULL, result = ran.result_::jsonb, updated_at = %s::timestamptz,
    started_at = ran.started_, finished_at = ran.finished_, attempts_history = {{append}}
FROM unnest(%s::bigint[], %s::integer[], %s::text[], %s::text[], %s::timestamptz[],
    %s::timestamptz[]) AS ran(id_, attempts_, worker_, result_, started_, finished_)
WHERE id = ran.id_ AND attempts = ran.attempts_ AND locked_by = ran.worker_
    AND status = '{S.RUNNING}' AND cancel_requested_at IS NULL
RETURNING id"""


@dataclass(frozen=True)
class Success:
    """A body that returned: its run, its result as JSON text, and when the body ran."""

    job: Job
    result: str
    started_at: datetime
    finished_at: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "finished_at", not_before(self.finished_at, self.started_at))


@cache
def _successes_sql() -> str:
    append = append_sql(
        "postgresql",
        started="ran.started_",
        finished="ran.finished_",
        outcome=f"'{S.SUCCEEDED}'::text",
        reason="''::text",
        error="NULL::jsonb",
    )
    return _SUCCESSES.format(append=append).strip()


@cache
def _successes_and_claim_sql() -> str:
    ctes, update = _claim_parts("postgresql")
    return (
        f"WITH ended AS ({_successes_sql()}), {ctes}, claimed AS ({update}) "
        "SELECT ARRAY(SELECT id FROM ended), claimed.* FROM (SELECT 1) AS one "
        "LEFT JOIN claimed ON true"
    )


def _successes_params(successes: list[Success], now) -> list:
    return [
        now,
        [s.job.pk for s in successes],
        [s.job.attempts for s in successes],
        [s.job.locked_by for s in successes],
        [s.result for s in successes],
        [s.started_at for s in successes],
        [s.finished_at for s in successes],
    ]


@cache
def _converters(vendor: str) -> list:
    """Per column, the functions that turn a raw value into the field's Python value."""
    found = []
    for field in FIELDS:
        column = field.get_col(TABLE)
        funcs = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        found.append((column, funcs))
    return found


def job_from_row(row) -> Job:
    values = []
    for value, (column, funcs) in zip(row, _converters(connection.vendor), strict=True):
        for func in funcs:
            value = func(value, column, connection)
        values.append(value)
    return Job.from_db("default", NAMES, values)


def _limited_names() -> object:
    """The limited queues, which the free claim leaves to jobs.limiter."""
    names = sorted(conf.get().queue_concurrency)
    return names if connection.vendor == "postgresql" else json.dumps(names)


def running_params(worker: str, now) -> list:
    """The parameters of ``SET_RUNNING``: the lease, the worker and the claim's time."""
    when = connection.ops.adapt_datetimefield_value
    return [when(now + conf.get().lease_timeout), worker, when(now), when(now)]


def running_by_clock_params(worker: str) -> list:
    """The parameters of ``SET_RUNNING_BY_CLOCK``: the lease's length and the worker."""
    return [conf.get().lease_timeout, worker]


def _claim_params(job_id: int, task: str, worker: str, now, count: int = 1) -> list:
    when = connection.ops.adapt_datetimefield_value
    due = when(now + CLAIM_CLOCK_SKEW)
    if connection.vendor == "postgresql":  # the CTEs' job and task, CLOCK, then the SET
        running = [job_id, task, when(now), *running_by_clock_params(worker)]
    else:
        running = [job_id, task, *running_params(worker, now)]
    return [*running, task, due, _limited_names(), count]


def not_before(moment: datetime, start: datetime | None) -> datetime:
    """``moment`` (a run's end, by this process's clock), or the run's start if that is later:
    a claim stamped with the database's clock (``CLOCK``) may be ahead of this process's by
    their skew, and a run never ends, on record, before it started."""
    return start if start is not None and moment < start else moment


def _end_params(job: Job, ending: Ending, now) -> list:
    when = connection.ops.adapt_datetimefield_value
    now = not_before(now, job.started_at)
    final = ending.status in (S.SUCCEEDED, S.DEAD, S.CANCELLED)
    expired = when(ending.lease_expired_before)
    error = json.dumps(ending.error) if ending.error is not None else None
    return [
        ending.status,
        ending.reason or "",
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
        ending.reason or "",
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
        prepared.execute(cursor, _claim_sql(connection.vendor, exact, one=True), params)
        row = cursor.fetchone()
    return job_from_row(row) if row else None


def claim_many(job_id: int, *, task: str, worker: str, count: int) -> list[Job]:
    """Claim the ``count`` best runnable jobs of ``task`` in ``job_id``'s queue, best first."""
    params = _claim_params(job_id, task, worker, timezone.now(), count)
    with connection.cursor() as cursor:
        prepared.execute(cursor, _claim_sql(connection.vendor), params)
        return in_claim_order(job_from_row(row) for row in cursor.fetchall())


def in_claim_order(jobs) -> list[Job]:
    """``jobs`` in the order a claim picks them (an UPDATE returns its rows in any order)."""
    return sorted(jobs, key=lambda job: (-job.priority, job.run_after, job.pk))


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
        sql = f"{_end_sql(connection.vendor)} RETURNING {COLUMNS}"
        prepared.execute(cursor, sql, params)
        row = cursor.fetchone()
    return job_from_row(row) if row else None


def _end_returning_id(job: Job, ending: Ending) -> bool:
    """``end`` that reads nothing back: whether the run was ended."""
    params = _end_params(job, ending, timezone.now())
    with connection.cursor() as cursor:
        prepared.execute(cursor, f"{_end_sql(connection.vendor)} RETURNING id", params)
        return cursor.fetchone() is not None


def end_successes(successes: list[Success]) -> set[int]:
    """Write the successes of a chunk's runs; return the ids of the runs ended.

    A run missing from the answer is no longer its job's, or a cancel was asked for
    meanwhile (jobs.completer then ends it cancelled). One UPDATE over arrays on PostgreSQL;
    a single success, or any on SQLite, by ``_END`` (which keeps the claim's start time).
    """
    if not successes:
        return set()
    if len(successes) == 1 or connection.vendor != "postgresql":  # scalars bind faster
        return {s.job.pk for s in successes if _end_returning_id(s.job, _succeeded(s))}
    with connection.cursor() as cursor:
        params = _successes_params(successes, timezone.now())
        prepared.execute(cursor, _successes_sql(), params)
        return {row[0] for row in cursor.fetchall()}


# An end's UPDATE that also reads whether a claim was refused for the task's or the queue's
# slots since the last end that found none (``held_at``, jobs.limiter.wake). FOR KEY SHARE is
# held to the commit: a claim holding the row is waited for and its mark seen; a claim after
# it waits for this commit and counts these runs ended. So a success that finds no mark needs
# no read after its commit. The queue's row is read before the task's, the order in which
# a claim locks them (jobs.limiter), so the two never wait on each other in a circle.
_READING_MARKS = (
    "WITH ended AS ({update}) SELECT ARRAY(SELECT id FROM ended), "
    f"(SELECT held_at IS NOT NULL FROM {STATE_TABLE} WHERE name = %s FOR KEY SHARE), "
    f"(SELECT held_at IS NOT NULL FROM {TASK_STATE_TABLE} WHERE name = %s FOR KEY SHARE)"
)


def end_successes_reading_marks(
    successes: list[Success], *, task: str | None, queue: str | None
) -> tuple[set[int], bool, bool]:
    """``end_successes`` on PostgreSQL, one statement that also reads the refusal marks of
    ``task`` and ``queue`` (None: not limited, not read); return the ids ended and whether
    each was marked."""
    update, params = successes_statement(successes)
    with connection.cursor() as cursor:
        cursor.execute(_READING_MARKS.replace("{update}", update), [*params, queue, task])
        ids, queue_held, task_held = cursor.fetchone()
    return set(ids), bool(task_held), bool(queue_held)


def successes_statement(successes: list[Success]) -> tuple[str, list]:
    """The UPDATE (PostgreSQL) that writes ``successes`` and returns the ids of the runs it
    ended, with its parameters: ``_END`` for one (scalars bind faster), arrays for more."""
    now = timezone.now()
    if len(successes) == 1:
        update = f"{_end_sql('postgresql')} RETURNING id"
        return update, _end_params(successes[0].job, _succeeded(successes[0]), now)
    return _successes_sql(), _successes_params(successes, now)


def end_successes_and_claim(
    successes: list[Success], job_id: int, *, task: str, worker: str, count: int
) -> tuple[set[int], list[Job]]:
    """Write ``successes`` and claim up to ``count`` jobs: one statement on PostgreSQL.

    Return the ids of the runs ended and the jobs claimed, best first.
    """
    if connection.vendor != "postgresql" or not successes:  # SQLite has no UPDATE in WITH
        ended = end_successes(successes)
        return ended, claim_many(job_id, task=task, worker=worker, count=count)
    with connection.cursor() as cursor:
        sql, params = successes_and_claim_statement(successes, job_id, task, worker, count)
        prepared.execute(cursor, sql, params)
        return read_successes_and_claim(cursor.fetchall())


def successes_and_claim_statement(
    successes: list[Success], job_id: int, task: str, worker: str, count: int
) -> tuple[str, list]:
    """``end_successes_and_claim``'s statement (PostgreSQL, one success or more) and its
    parameters; ``read_successes_and_claim`` reads its rows."""
    now = timezone.now()
    params = _successes_params(successes, now) + _claim_params(job_id, task, worker, now, count)
    return _successes_and_claim_sql(), params


def read_successes_and_claim(rows: list[tuple]) -> tuple[set[int], list[Job]]:
    """The ids of the runs ended and the jobs claimed, best first."""
    ended = set(rows[0][0]) if rows else set()
    claimed = (job_from_row(row[1:]) for row in rows if row[1] is not None)
    return ended, in_claim_order(claimed)


def hand_back(jobs: list[Job]) -> list[Job]:
    """Give claimed runs whose bodies never started back: due as they were, the attempt
    given back, no history entry (``queued`` again, or ``retrying`` if an attempt came
    before). Fenced on the run's holder; return the jobs given back."""
    if not jobs:
        return []
    now = timezone.now()
    when = connection.ops.adapt_datetimefield_value
    marks = ", ".join(["%s"] * len(jobs))
    sql = (
        f"UPDATE {TABLE} SET status = CASE WHEN attempts > 1 THEN '{S.RETRYING}' "
        f"ELSE '{S.QUEUED}' END, attempts = attempts - 1, locked_by = '', "
        "lease_expires_at = NULL, updated_at = %s, "
        "started_at = CASE WHEN attempts > 1 THEN started_at END "
        f"WHERE id IN ({marks}) AND locked_by = %s AND status = '{S.RUNNING}' RETURNING id"
    )
    by_id = {job.pk: job for job in jobs}
    with connection.cursor() as cursor:
        cursor.execute(sql, [when(now), *by_id, jobs[0].locked_by])
        return [by_id[row[0]] for row in cursor.fetchall()]


def _succeeded(success: Success) -> Ending:
    return Ending(status=S.SUCCEEDED, result=success.result)


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
