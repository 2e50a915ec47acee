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
Inside the caller's transaction (``atomic``) the locks are held to its commit, as on the
statement-at-a-time path. Everything the claim decides under the lock is SQL: a pause, the
queue's limit (``CONVEYOR_QUEUE_CONCURRENCY``), the task's concurrency, each key's, and the
refusal marks (``held_at``) the next end reads. The pick takes its queue from the lock's
statement, through a transaction-local setting (``QUEUE_SETTING``), so it claims, counts and
marks in the queue whose row is locked even if the named job moved meanwhile.

Limits with a rate or fairness keep state computed in Python, and server-side binding
(``server_side_binding`` in the database options) allows one statement per message: both take
jobs.limiter's statement-at-a-time path.
"""

from dataclasses import dataclass
from functools import cache, partial

from django.db import connection
from django.utils import timezone

from jobs import prepared, statements
from jobs.models import JobStatus

S = JobStatus
TABLE = statements.TABLE
STATE_TABLE = statements.STATE_TABLE
TASK_STATE_TABLE = statements.TASK_STATE_TABLE
RUNNING = f"SELECT count(*) FROM {TABLE} r WHERE r.status = '{S.RUNNING}'"
# The queue the lock's statement locked, for the pick's statement (local to the transaction;
# emptied first, so a claim earlier in the same transaction leaves nothing behind).
QUEUE_SETTING = "conveyor.claim_queue"
_HAND_OVER = f"set_config('{QUEUE_SETTING}', j.queue, true)"
# A job of the task named by the task's state row being marked, due as the pick counts due
# (its one parameter): a claim that took nothing marks a key's refusal only if one was there.
_DUE = (
    f"SELECT 1 FROM {TABLE} d WHERE d.task = {TASK_STATE_TABLE}.name AND {statements.runnable('d')}"
)
_EMPTY = f"SELECT set_config('{QUEUE_SETTING}', '', true)"


@dataclass(frozen=True)
class Claimed:
    """What the message answered: the rows of the statement sent before the claim, the jobs
    claimed (best first) and the state rows' refusal marks as the lock read them."""

    before: list[tuple]
    jobs: list
    # False: the lock read no row (the job is gone, or a state row is missing: jobs.limiter
    # makes it) and nothing was claimed.
    locked: bool
    queue: str = ""
    queue_held: bool = False
    task_held: bool = False


def applies(plan) -> bool:
    """Whether ``plan``'s claim can be decided in one message: PostgreSQL with client-side
    binding, no rate, no fairness."""
    if not statements.several_per_message():
        return False
    limit = plan.limit
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
    transaction; written even when the lock reads no row and nothing is claimed).

    The lock and the pick go as ``EXECUTE`` of their prepared forms (jobs.prepared). If the
    server lost one (or it went stale), a message sent outside a transaction was rolled back
    whole, nothing written, and is sent again as text.
    """
    return prepared.once_more_as_text(
        partial(_claim, plan, job_id, task, worker, count, only, before)
    )


def _claim(plan, job_id: int, task: str, worker: str, count: int, only, before) -> Claimed:
    if not plan.takes_chunks:  # a key's rule is checked per job: one at a time
        count = 1
    limit = plan.limit
    concurrency = limit.concurrency if limit is not None else None
    key_concurrency = limit.key_concurrency if limit is not None else None
    pick = _pick_sql(
        plan.queue_limit is not None, bool(concurrency), bool(key_concurrency), only is not None
    )
    lock = statements.limited_lock_sql("postgresql", plan.queue_limit is not None, _HAND_OVER)
    sql = f"{_EMPTY}; {prepared.inline(lock)}; {prepared.inline(pick)}"
    limits = (plan.queue_limit, concurrency, key_concurrency)
    params = [task, job_id, *_pick_params(limits, task, worker, count, only, timezone.now())]
    if before is not None:
        sql, params = f"{before[0]}; {sql}", [*before[1], *params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        done = cursor.fetchall() if before is not None else []
        if before is not None:
            cursor.nextset()
        cursor.nextset()  # past the emptied setting
        locked = cursor.fetchone()
        cursor.nextset()
        jobs = statements.in_claim_order(map(statements.job_from_row, cursor.fetchall()))
    if locked is None:
        # A row the lock did not see (a state row made, a job moved, since the lock's
        # snapshot) let the pick claim without it: give those back, untouched.
        statements.hand_back(jobs)
        return Claimed(done, [], locked=False)
    return Claimed(done, jobs, True, locked[0], bool(locked[3]), bool(locked[4]))


def chunk_sql(count: str, free: str) -> str:
    """jobs.limiter.chunk_within in SQL: all ``count`` while ``free`` is at least twice it,
    else one (none when nothing is free)."""
    return f"CASE WHEN {free} >= 2 * {count} THEN {count} ELSE LEAST(1, GREATEST(0, {free})) END"


@cache
def _pick_sql(queue_limited: bool, task_limited: bool, key_limited: bool, only: bool) -> str:
    """The claim's statement: the counts, the pick and the refusal marks, in the queue the
    lock's statement locked. Its parameters, in order, are ``_pick_params``'s."""
    state = ["q.name AS queue", "q.paused_at IS NULL AND t.paused_at IS NULL AS unpaused"]
    if queue_limited:
        state.append(f"%s - ({RUNNING} AND r.queue = q.name) AS queue_free")
    if task_limited:
        state.append(f"({RUNNING} AND r.task = t.name) AS task_running")
    # How many to take: the queue's free slots cut the chunk first, then the task's.
    asked = chunk_sql("%s", "s.queue_free") if queue_limited else "%s"
    take = chunk_sql("a.asked", "(%s - a.task_running)") if task_limited else "a.asked"
    rule = (
        f"AND ({RUNNING} AND r.task = j.task AND r.limit_key = j.limit_key) < %s "
        if key_limited
        else ""
    )
    pick = (
        f"SELECT j.id FROM {TABLE} j WHERE j.queue = (SELECT queue FROM n) AND j.task = %s "
        f"AND {statements.runnable('j')} {'AND j.id = %s ' if only else ''}{rule}"
        "ORDER BY j.priority DESC, j.run_after, j.id "
        "LIMIT COALESCE((SELECT take FROM n), 0) FOR UPDATE OF j SKIP LOCKED"
    )
    ctes = [
        # The claim's time (statements.CLOCK), read after the lock: a run that ended while
        # this claim waited for it ended before this one started.
        statements.CLOCK,
        f"s AS MATERIALIZED (SELECT {', '.join(state)} FROM {STATE_TABLE} q "
        f"JOIN {TASK_STATE_TABLE} t ON t.name = %s "
        f"WHERE q.name = NULLIF(current_setting('{QUEUE_SETTING}', true), ''))",
        f"a AS MATERIALIZED (SELECT s.*, CASE WHEN s.unpaused THEN {asked} ELSE 0 END AS asked "
        "FROM s)",
        f"n AS MATERIALIZED (SELECT a.*, {take} AS take FROM a)",
        f"claimed AS ({statements.SET_RUNNING_BY_CLOCK} WHERE id = ANY(ARRAY({pick})) "
        f"RETURNING {statements.COLUMNS})",
    ]
    if queue_limited:  # refused for the queue's slots: the next end rings
        ctes.append(
            f"queue_mark AS (UPDATE {STATE_TABLE} SET held_at = %s "
            "WHERE name = (SELECT queue FROM n WHERE unpaused AND queue_free <= 0))"
        )
    refused = []
    if task_limited:  # the task's slots ran out before the chunk was whole
        refused.append("(got < n.asked AND n.task_running + got >= %s)")
    if key_limited:  # nothing claimed though a job was due: its key's slots may have held it
        refused.append(f"(got = 0 AND EXISTS ({_DUE} AND d.queue = n.queue))")
    if refused:
        ctes.append(
            f"task_mark AS (UPDATE {TASK_STATE_TABLE} SET held_at = %s WHERE name = %s "
            "AND EXISTS (SELECT 1 FROM n, (SELECT count(*) AS got FROM claimed) c "
            f"WHERE n.asked > 0 AND ({' OR '.join(refused)})))"
        )
    return f"WITH {', '.join(ctes)} SELECT * FROM claimed"


def _pick_params(limits, task: str, worker: str, count: int, only: int | None, now) -> list:
    """``_pick_sql``'s parameters, in the order its placeholders come; ``limits``: the
    queue's limit, the task's concurrency and the per-key concurrency (None: none)."""
    queue_limit, concurrency, key_concurrency = limits
    when = connection.ops.adapt_datetimefield_value
    params = [when(now)]  # clock: the earliest the claim is stamped
    params += [queue_limit] if queue_limit is not None else []  # s: queue_free
    params.append(task)  # s: the task's state row
    params += [count, count] if queue_limit is not None else [count]  # a: asked
    params += [concurrency, concurrency] if concurrency else []  # n: take
    params += [*statements.running_by_clock_params(worker), task]  # claimed: SET, the pick
    params.append(when(now + statements.CLAIM_CLOCK_SKEW))
    params += [only] if only is not None else []
    params += [key_concurrency] if key_concurrency else []
    params += [when(now)] if queue_limit is not None else []  # queue_mark
    if concurrency or key_concurrency:  # task_mark
        params += [when(now), task] + ([concurrency] if concurrency else [])
        params += [when(now + statements.CLAIM_CLOCK_SKEW)] if key_concurrency else []
    return params
