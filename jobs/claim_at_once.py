"""A limited claim sent in one message on PostgreSQL: the lock and the pick together.

A limited queue's or task's claims take turns on their state rows (jobs.limiter): the lock,
then counts in statements that come after it, so they see every claim committed before the
lock was granted. Sent one statement at a time, the lock is held across the client's round
trips, and in a worker of many threads each round trip also waits its turn for the
interpreter: the claims queue behind a lock whose holder waits for the GIL (a 32-thread
webhooks worker with one endpoint claimed about 150 jobs a second this way).

Here the lock's SELECT and the pick's UPDATE (and, for a chunk, the successes before them)
leave as one query string: psycopg's client-side binding sends it as one simple-protocol
message. Outside a transaction the server runs it as one implicit transaction: the locks
are taken, the pick's statement takes its own snapshot after them (READ COMMITTED: one per
statement), and the commit lets them go, with nothing waiting on the client in between.
So everything the claim decides under the lock is SQL: a pause, the queue's limit, the
task's concurrency, each key's, and the refusal marks (``held_at``) the next end reads.
Limits with a rate or fairness keep state computed in Python and take jobs.limiter's path.
"""

from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from jobs import statements
from jobs.models import JobStatus

S = JobStatus
TABLE = statements.TABLE
STATE_TABLE = statements.STATE_TABLE
TASK_STATE_TABLE = statements.TASK_STATE_TABLE
RUNNING = f"SELECT count(*) FROM {TABLE} r WHERE r.status = '{S.RUNNING}'"


@dataclass(frozen=True)
class Claimed:
    """What the message answered: the rows of the statement sent before the claim, the jobs
    claimed (best first) and the state rows' refusal marks as the lock read them."""

    before: list[tuple]
    jobs: list
    locked: bool  # False: a state row is missing, nothing was claimed (jobs.limiter makes it)
    queue: str = ""
    queue_held: bool = False
    task_held: bool = False


def applies(plan) -> bool:
    """Whether ``plan``'s claim can be decided in SQL alone: PostgreSQL, no rate, no fairness."""
    limit = plan.limit
    if connection.vendor != "postgresql":
        return False
    return limit is None or not (limit.task_rate or limit.key_rate or limit.fair)


def claim(
    plan,
    job_id: int,
    *,
    task: str,
    worker: str,
    count: int = 1,
    only: int | None = None,
    before: tuple[str, list] | None = None,
) -> Claimed:
    """Claim up to ``count`` jobs of ``task`` in ``job_id``'s queue under ``plan``'s limits,
    in one message, after ``before`` (a statement and its parameters, in the same
    transaction; written even when a state row is missing and nothing could be claimed).
    """
    if not plan.takes_chunks:  # a key's rule is checked per job: one at a time
        count = 1
    now = timezone.now()
    pick, pick_params = _pick(plan, job_id, task, worker, count, only, now)
    lock = statements.limited_lock_sql("postgresql", plan.queue_limit is not None)
    sql, params = f"{lock}; {pick}", [task, job_id, *pick_params]
    if before is not None:
        sql, params = f"{before[0]}; {sql}", [*before[1], *params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        done = cursor.fetchall() if before is not None else []
        if before is not None:
            cursor.nextset()
        locked = cursor.fetchone()
        cursor.nextset()
        rows = cursor.fetchall()
    if locked is None:
        return Claimed(done, [], locked=False)
    jobs = statements.in_claim_order(map(statements.job_from_row, rows))
    return Claimed(done, jobs, True, locked[0], bool(locked[3]), bool(locked[4]))


def _chunk(count: str, free: str) -> str:
    """jobs.limiter.chunk_within in SQL: all ``count`` while ``free`` is at least twice it,
    else one (none when nothing is free)."""
    return f"CASE WHEN {free} >= 2 * {count} THEN {count} ELSE LEAST(1, GREATEST(0, {free})) END"


def _pick(plan, job_id, task, worker, count, only, now) -> tuple[str, list]:
    """The claim's statement: counts, the pick and the refusal marks, over the locked rows."""
    limit = plan.limit
    concurrency = limit.concurrency if limit is not None else None
    key_concurrency = limit.key_concurrency if limit is not None else None
    when = connection.ops.adapt_datetimefield_value
    # What runs, read after the lock: the queue's and the task's counts.
    state = ["j.queue", "q.paused_at IS NULL AND t.paused_at IS NULL AS unpaused"]
    if plan.queue_limit is not None:
        state.append(f"%s - ({RUNNING} AND r.queue = j.queue) AS queue_free")
    if concurrency:
        state.append(f"({RUNNING} AND r.task = t.name) AS task_running")
    params = [plan.queue_limit] if plan.queue_limit is not None else []
    params += [task, job_id]
    # How many to take: the queue's free slots cut the chunk first, then the task's.
    asked = _chunk("%s", "s.queue_free") if plan.queue_limit is not None else "%s"
    params += [count, count] if plan.queue_limit is not None else [count]
    take = "a.asked"
    if concurrency:
        take = _chunk("a.asked", "(%s - a.task_running)")
        params += [concurrency, concurrency]
    rules = ""
    if key_concurrency:
        rules = f"AND ({RUNNING} AND r.task = j.task AND r.limit_key = j.limit_key) < %s "
    pick = (
        f"SELECT j.id FROM {TABLE} j WHERE j.queue = (SELECT queue FROM n) AND j.task = %s "
        f"AND j.status IN ('{S.QUEUED}', '{S.RETRYING}') AND j.run_after <= %s "
        f"AND j.cancel_requested_at IS NULL {'AND j.id = %s ' if only is not None else ''}"
        f"{rules}ORDER BY j.priority DESC, j.run_after, j.id "
        "LIMIT COALESCE((SELECT take FROM n), 0) FOR UPDATE OF j SKIP LOCKED"
    )
    pick_params = [task, when(now + statements.CLAIM_CLOCK_SKEW)]
    pick_params += [only] if only is not None else []
    pick_params += [key_concurrency] if key_concurrency else []
    ctes = [
        "s AS MATERIALIZED (SELECT " + ", ".join(state) + f" FROM {TABLE} j "
        f"JOIN {STATE_TABLE} q ON q.name = j.queue JOIN {TASK_STATE_TABLE} t ON t.name = %s "
        "WHERE j.id = %s)",
        f"a AS MATERIALIZED (SELECT s.*, CASE WHEN s.unpaused THEN {asked} ELSE 0 END AS asked "
        "FROM s)",
        f"n AS MATERIALIZED (SELECT a.*, {take} AS take FROM a)",
        f"claimed AS ({statements.SET_RUNNING.strip()} WHERE id = ANY(ARRAY({pick})) "
        f"RETURNING {statements.COLUMNS})",
    ]
    params += [*statements.running_params(worker, now), *pick_params]
    if plan.queue_limit is not None:  # refused for the queue's slots: the next end rings
        ctes.append(
            f"queue_mark AS (UPDATE {STATE_TABLE} SET held_at = %s "
            "WHERE name = (SELECT queue FROM n WHERE unpaused AND queue_free <= 0))"
        )
        params.append(when(now))
    refused = []
    if concurrency:  # the task's slots ran out before the chunk was whole
        refused.append("(got < n.asked AND n.task_running + got >= %s)")
    if key_concurrency:  # its keys' slots may be what holds it
        refused.append("got = 0")
    if refused:
        ctes.append(
            f"task_mark AS (UPDATE {TASK_STATE_TABLE} SET held_at = %s WHERE name = %s "
            "AND EXISTS (SELECT 1 FROM n, (SELECT count(*) AS got FROM claimed) c "
            f"WHERE n.asked > 0 AND ({' OR '.join(refused)})))"
        )
        params += [when(now), task] + ([concurrency] if concurrency else [])
    sql = f"WITH {', '.join(ctes)} SELECT * FROM claimed"
    return sql, params
