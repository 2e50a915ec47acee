"""Advance a workflow when one of its jobs ends: mark its edges done, release what it unblocks.

``advance(*jobs)`` is called by every writer of a workflow job's end, inside the transaction
that records that end (jobs.completer for a run's end or a batch chunk's successes,
jobs.services.operator for the cancel of a job that was not running). An edge is one
dependency, or a *range*: a group's members, written one after another, that a callback
waits for as one edge (``JobDependency.range_start`` to ``range_end``; jobs.workflows.rows.edges).
It

1. marks the jobs' own outgoing edges done (``UPDATE … SET done = true WHERE dependency IN
   (ended) … RETURNING dependant``, for those now finished) and finds the dependants of the
   ranges holding them (one index probe each, writing nothing): so a 10,000-member group
   never takes turns on one counter row, and its members' ends write no edge at all;
2. locks their dependants' job rows, all in id order in that same statement (``SELECT …
   FOR NO KEY UPDATE``): one lock order for every transaction, so two chunks ending members
   of the same groups cannot deadlock;
3. then, in a new statement (on PostgreSQL sent in the same message as 1 and 2), asks
   whether D still waits: an edge of it not done (the partial index on ``dependant WHERE
   NOT done``), or a range of it with a member that has not ended (one probe of the index of
   workflows' unfinished jobs); if not, decides D's fate from its
   dependencies' outcomes and moves it with a conditional UPDATE (``WHERE status =
   'waiting'``): released to ``queued`` (its doorbell rung on commit), or cancelled with
   reason ``upstream`` when its condition is not met — and a cancelled D advances in turn.
   Its ranges are marked done as it is decided.

A worker's successes take ``end_and_advance``: one message opens the transaction, writes
the ends (and the next chunk's claim) and sends 1, 2 and 3; the ``COMMIT`` follows, after
the releases if any. The lock is still held to the commit, so what follows holds for it too.

Why two members ending at once can neither both release D nor both miss it: each marks its
own edge done (or, in a range, its own end) *before* it asks for D's lock, and holds that
lock until it commits. The one
that gets the lock second waits for the first to commit; under READ COMMITTED its next
statement sees everything the first committed. So if A and B are D's last two edges, the
first to lock (say A) may see B's edge not done yet (B has not committed) and leave D — but
then B locks after A committed, sees A's edge done and its own, and releases D: never both
miss. And at most one can release it: the second to lock sees D no longer ``waiting``
(the first's committed release), and the release's ``WHERE status = 'waiting'`` would refuse
it anyway. Nothing polls; nothing is decided outside a transaction that records an end.

The released job's payload gets its dependencies' outcomes, read in that same transaction
(jobs.workflows.inputs).

What an operator's retry of a node does to its workflow is jobs.workflows.retry.
"""

from collections.abc import Callable

from django.db import connection
from django.db.models import Q
from django.utils import timezone
from psycopg.pq import TransactionStatus

from jobs import prepared, statements
from jobs.models import (
    FINISHED,
    UNFINISHED,
    Condition,
    Job,
    JobDependency,
    JobReason,
    JobStatus,
)
from jobs.publish import publish_on_commit
from jobs.services.base import log_job
from jobs.transitions import transition
from jobs.workflows.inputs import as_stored, inputs_of

S = JobStatus
EDGES = JobDependency._meta.db_table
JOBS = Job._meta.db_table
# A dependant whose readiness is still to be asked (``_decide``).
ASK = object()


def advance(*jobs: Job, held: Callable[[Job], bool] | None = None) -> list[Job]:
    """Record that ``jobs`` ended (inside that transaction); return the jobs they released.

    Their doorbells are rung once committed, but for those ``held`` says the caller claims
    itself (jobs.batches: the message that ended them claims as many again, and rings for
    what it leaves).
    """
    ended = [job for job in jobs if job.workflow_id is not None and job.status in FINISHED]
    released = _released(_mark_done(ended) if ended else [])
    _ring_on_commit(released, held)
    return released


def _ring_on_commit(released: list[Job], held: Callable[[Job], bool] | None) -> None:
    rung = [job for job in released if held is None or not held(job)]
    if rung:
        publish_on_commit(rung)


def end_and_advance(
    statement: str, params: list, jobs: list[Job], held: Callable[[Job], bool] | None = None
) -> tuple[list, list[Job]]:
    """Run ``statement`` (an end of runs of ``jobs``), then ``advance`` the workflows of
    those it ended, in one transaction whose first message carries the ``BEGIN``, the end,
    steps 1 and 2 and step 3: a chunk that releases nothing costs two round trips (that
    message and the ``COMMIT``), not four. Return the statement's rows and the jobs
    released (their doorbells rung once committed, but for those ``held``: see ``advance``).

    PostgreSQL with several statements per message, outside any transaction (the caller
    checks ``in_one_message``). Nothing in between may open a transaction of Django's own:
    Django still sees autocommit, so a failure rolls back here. The three statements go as
    ``EXECUTE`` of their prepared forms (jobs.prepared); if the server lost one (or it went
    stale), the transaction is rolled back, nothing written, and the message sent again as
    text.
    """
    rows, released = prepared.once_more_as_text(lambda: _end_and_advance(statement, params, jobs))
    _ring_on_commit(released, held)  # committed: at once, a failure logged (the sweeper re-sends)
    return rows, released


def _end_and_advance(statement: str, params: list, jobs: list[Job]) -> tuple[list, list[Job]]:
    message = "; ".join(
        (
            "BEGIN",
            prepared.inline(statement),
            prepared.inline(_MARK_AND_LOCK_PG),
            prepared.inline(_READY),
        )
    )
    with connection.cursor() as cursor:
        try:
            keys = _keys(jobs)
            cursor.execute(message, [*params, *keys, *keys, S.WAITING])
            cursor.nextset()  # past the BEGIN
            rows = cursor.fetchall()
            cursor.nextset()
            locked = cursor.fetchall()
            cursor.nextset()
            released = _released(_still_waiting(locked, dict(cursor.fetchall())))
            cursor.execute("COMMIT")
        except BaseException:  # rolled back, nothing written (jobs.prepared may send it again)
            _roll_back(cursor)
            raise
    return rows, released


def in_one_message() -> bool:
    """Whether ``end_and_advance`` may run here (else: ``advance`` in an ``atomic`` block)."""
    if not (
        statements.several_per_message()
        and connection.get_autocommit()
        and not connection.in_atomic_block
    ):
        return False
    raw = connection.connection  # not inside a transaction opened some other way either
    return raw is None or raw.info.transaction_status == TransactionStatus.IDLE


def _roll_back(cursor) -> None:
    """End ``end_and_advance``'s transaction after a failure (closed with its connection if
    that is what failed)."""
    raw = connection.connection
    if raw is None or raw.info.transaction_status == TransactionStatus.IDLE:
        return
    try:
        cursor.execute("ROLLBACK")
    except Exception:  # the connection failed (the first failure is the one raised)
        connection.close()
    except BaseException:  # a second signal came meanwhile: never reuse the connection
        connection.close()
        raise


def _released(ready: list[tuple[int, object]]) -> list[Job]:
    """Decide the dependants ``_mark_done`` answered, then those of each one cancelled in
    turn; return the ones released."""
    released: list[Job] = []
    while ready:  # a cancelled dependant ends too: its own dependants are decided in turn
        cancelled = []
        for dependant, payload in ready:
            moved = _decide(dependant, payload)
            if moved is None:
                continue
            if moved.status == S.QUEUED:
                released.append(moved)
            else:
                cancelled.append(moved)
        ready = _mark_done(cancelled) if cancelled else []
    return released


_FINISHED = ", ".join(repr(str(status)) for status in sorted(FINISHED))
# The jobs that ended, as two arrays (ids, workflow ids) given by the caller, who has their
# rows: nothing here reads them again.
_ENDED = "ended AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[]) AS u(id, workflow_id))"


def _holds(job: str, workflow: str) -> str:
    """SQL: whether range edge ``e`` holds job ``job`` of workflow ``workflow`` (expressions).
    A workflow's ranges never overlap (jobs.workflows.rows.edges), so the one holding a job
    is the first that ends at or after it (an index probe on ``job_dep_range_idx``), if it
    also starts at or before it; shared ranges end at the same id."""
    return (
        f"e.workflow_id = {workflow} AND e.range_end = (SELECT min(r.range_end) FROM {EDGES} r "
        f"WHERE r.workflow_id = {workflow} AND r.range_end IS NOT NULL AND r.range_end >= {job}) "
        f"AND e.range_start <= {job}"
    )


# The dependants of the range edges holding ``ended`` jobs.
_SPANNED = (
    f"SELECT e.dependant_id FROM ended j JOIN {EDGES} e ON {_holds('j.id', 'j.workflow_id')} "
    "WHERE NOT e.done"
)
# The ids of the range edges holding a job; parameters: the job, its workflow.
HOLDING = (
    "SELECT e.id FROM (SELECT %s::bigint AS id, %s::bigint AS workflow_id) j "
    f"JOIN {EDGES} e ON {_holds('j.id', 'j.workflow_id')}"
)
# Steps 1 and 2 in one statement: the ended jobs' own edges are marked (and row-locked) by
# the CTE, if the job is finished now (after an end sent in the same message: a run taken
# away, or cancelled meanwhile, is not; whoever ends it advances it); the dependants of the
# ranges holding them are found (a range is not marked: whether it has a member left is
# asked in step 3, of the members' statuses); then the main query locks the dependants, in
# id order (one lock order for every transaction).
_MARK_AND_LOCK_PG = (
    f"WITH {_ENDED}, marked AS (UPDATE {EDGES} e SET done = true FROM {JOBS} j "
    "WHERE e.dependency_id IN (SELECT id FROM ended) AND NOT e.done "
    f"AND j.id = e.dependency_id AND j.status IN ({_FINISHED}) RETURNING e.dependant_id) "
    f"SELECT id, status FROM {JOBS} WHERE id IN (SELECT dependant_id FROM marked "
    f"UNION ALL {_SPANNED}) ORDER BY id FOR NO KEY UPDATE"
)
# SQLite writes one transaction at a time: no lock to take (and no range edges: see
# jobs.workflows.rows.edges).
_MARK_SQLITE = (
    f"UPDATE {EDGES} SET done = true WHERE dependency_id IN ({{ids}}) AND NOT done "
    "RETURNING dependant_id"
)
# Whether a range edge ``e`` has a member that has not ended: one probe of
# ``job_workflow_open_idx`` (workflow, id, status) over the range's entries, the first found
# enough. The statuses are asked together: no other partial index's condition (the runnable
# jobs', the running ones') follows from all four, so no plan can answer it from those by
# reading every queued job of the system (which a plan made before a backlog thinks few).
_MEMBER_LEFT = (
    f"EXISTS (SELECT 1 FROM {JOBS} m WHERE m.workflow_id = e.workflow_id "
    f"AND m.status IN ({', '.join(repr(str(status)) for status in UNFINISHED)}) "
    "AND m.id >= e.range_start AND m.id <= e.range_end)"
)


def waits(dependant: str) -> str:
    """SQL: whether ``dependant`` (an expression) still waits: an edge of it not done, or a
    range edge whose range has a member that has not ended."""
    return (
        f"EXISTS (SELECT 1 FROM {EDGES} e WHERE e.dependant_id = {dependant} AND NOT e.done "
        f"AND (e.range_end IS NULL OR {_MEMBER_LEFT}))"
    )


# Step 3 for every dependant at once, sent in the same message as steps 1 and 2 where a
# message may carry several statements: a statement of its own (its snapshot taken after
# the locks) that answers the dependants now ready (nothing left to wait for) with their
# payloads, so a dependant still waiting costs no round trip of its own.
_READY = (
    f"WITH {_ENDED} SELECT d.id, d.payload FROM {JOBS} d WHERE d.id IN (SELECT dependant_id "
    f"FROM {EDGES} WHERE dependency_id IN (SELECT id FROM ended) "
    f"UNION ALL {_SPANNED}) AND d.status = %s AND NOT {waits('d.id')}"
)


def _keys(jobs: list[Job]) -> list[list[int]]:
    """``_ENDED``'s parameters for ``jobs``."""
    return [[job.pk for job in jobs], [job.workflow_id for job in jobs]]


def _mark_done(dependencies: list[Job]) -> list[tuple[int, object]]:
    """Mark ``dependencies``' edges done and lock their dependants; return those still
    waiting that may be ready, each with its payload if step 3 already found it ready (sent
    in the same message) or ``ASK`` (``_decide`` asks)."""
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            ids = ", ".join(["%s"] * len(dependencies))
            cursor.execute(_MARK_SQLITE.format(ids=ids), [job.pk for job in dependencies])
            return [(job_id, ASK) for job_id in sorted({row[0] for row in cursor.fetchall()})]
        keys = _keys(dependencies)
        if not statements.several_per_message():  # steps 1 and 2 alone; 3 per dependant
            cursor.execute(_MARK_AND_LOCK_PG, keys)
            locked = cursor.fetchall()
            return [(job_id, ASK) for job_id, status in locked if status == S.WAITING]
        cursor.execute(f"{_MARK_AND_LOCK_PG}; {_READY}", [*keys, *keys, S.WAITING])
        locked = cursor.fetchall()
        cursor.nextset()
        return _still_waiting(locked, dict(cursor.fetchall()))


def _still_waiting(locked: list[tuple[int, str]], ready: dict) -> list[tuple[int, object]]:
    """The dependants locked by step 2 that step 3 found ready, with their payloads. Not
    waiting: cancelled meanwhile, or released by another ending (see above). Waiting but
    not ready: an edge is left, whose end will decide it."""
    return [
        (job_id, ready[job_id])
        for job_id, status in locked
        if status == S.WAITING and job_id in ready
    ]


def _decide(dependant: int, payload=ASK) -> Job | None:
    """Release or cancel ``dependant`` if its last edge is done; None if it still waits.

    ``payload``: the dependant's, read by step 3 after the lock (it is ready); ``ASK``: find
    out now.
    """
    if payload is ASK:
        with connection.cursor() as cursor:
            # A new statement: it sees every end committed before the lock was granted
            # (SQLite: its writers take turns, no lock needed).
            cursor.execute(
                f"SELECT {waits('%s')}, (SELECT payload FROM {JOBS} WHERE id = %s AND status = %s)",
                [dependant, dependant, S.WAITING],
            )
            row = cursor.fetchone()
            if row[0] or row[1] is None:
                return None
            payload = row[1]
    inputs = inputs_of(dependant)
    if inputs.condition == Condition.SUCCESS and inputs.first_failed:
        job_id, task, status = inputs.first_failed
        why = f"dependency job {job_id} ({task}) ended {status}"
        return _cancel(dependant, JobReason.UPSTREAM, why)
    if inputs.condition == Condition.FAILURE and not inputs.first_failed:
        return _cancel(dependant, JobReason.NOT_NEEDED, "not needed: every dependency succeeded")
    now = timezone.now()
    moved = transition(
        Q(pk=dependant),
        S.QUEUED,
        from_=[S.WAITING],
        payload=as_stored(inputs.payload(payload)),
        run_after=now,
        published_at=now,
        publish_count=0,
        defer=("payload",),  # just written, and big: the callback's members
    )
    if moved:
        log_job("workflow.released", moved[0], workflow=moved[0].workflow_id)
        return moved[0]
    return None


def _cancel(dependant: int, reason: JobReason, why: str) -> Job | None:
    moved = transition(
        Q(pk=dependant), S.CANCELLED, from_=[S.WAITING], reason=reason, last_error=why
    )
    if moved:
        log_job("workflow.cancelled_dependant", moved[0], reason=reason, error=why)
        return moved[0]
    return None
