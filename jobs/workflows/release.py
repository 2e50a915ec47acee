"""Advance a workflow when one of its jobs ends: mark its edges done, release what it unblocks.

``advance(*jobs)`` is called by every writer of a workflow job's end, inside the transaction
that records that end (jobs.completer for a run's end or a batch chunk's successes,
jobs.services.operator for the cancel of a job that was not running). It

1. marks the jobs' own outgoing edges done (``UPDATE … SET done = true WHERE dependency =
   ANY(ended) RETURNING dependant``): each member writes only its own edges, so a
   10,000-member group never takes turns on one counter row, and a chunk of 25 members
   writes theirs in one statement;
2. locks their dependants' job rows, all in id order in that same statement (``SELECT …
   FOR NO KEY UPDATE``): one lock order for every transaction, so two chunks ending members
   of the same groups cannot deadlock;
3. then, in a new statement (on PostgreSQL sent in the same message as 1 and 2), asks
   whether any edge of D is still not done (the partial index on ``dependant WHERE NOT
   done``); if none is, decides D's fate from its
   dependencies' outcomes and moves it with a conditional UPDATE (``WHERE status =
   'waiting'``): released to ``queued`` (its doorbell rung on commit), or cancelled with
   reason ``upstream`` when its condition is not met — and a cancelled D advances in turn.

A worker's successes take ``end_and_advance``: one message opens the transaction, writes
the ends (and the next chunk's claim) and sends 1, 2 and 3; the ``COMMIT`` follows, after
the releases if any. The lock is still held to the commit, so what follows holds for it too.

Why two members ending at once can neither both release D nor both miss it: each marks its
own edge done *before* it asks for D's lock, and holds that lock until it commits. The one
that gets the lock second waits for the first to commit; under READ COMMITTED its next
statement sees everything the first committed. So if A and B are D's last two edges, the
first to lock (say A) may see B's edge not done yet (B has not committed) and leave D — but
then B locks after A committed, sees A's edge done and its own, and releases D: never both
miss. And at most one can release it: the second to lock sees D no longer ``waiting``
(the first's committed release), and the release's ``WHERE status = 'waiting'`` would refuse
it anyway. Nothing polls; nothing is decided outside a transaction that records an end.

The released job's payload gets its dependencies' outcomes, in the order the workflow
declared them, computed in that same transaction (``with_inputs``): ``"members"``: a list of
``{job_id, task, status, reason, result, error}``, and ``"previous"``: the result of its one
dependency when it has exactly one (a chain's step).

What an operator's retry of a node does to its workflow is jobs.workflows.retry.
"""

import json
from collections.abc import Callable

from django.db import connection
from django.db.models import Q
from django.utils import timezone
from psycopg.pq import TransactionStatus

from jobs import prepared, statements
from jobs.models import FINISHED, Condition, Job, JobDependency, JobReason, JobStatus
from jobs.publish import publish_on_commit
from jobs.services.base import log_job
from jobs.transitions import transition

S = JobStatus
EDGES = JobDependency._meta.db_table
JOBS = Job._meta.db_table
# A released job's payload keys (documented in docs/jobs.md, Workflows).
MEMBERS_KEY = "members"
PREVIOUS_KEY = "previous"
# A dependant whose readiness is still to be asked (``_decide``).
ASK = object()


def advance(*jobs: Job, held: Callable[[Job], bool] | None = None) -> list[Job]:
    """Record that ``jobs`` ended (inside that transaction); return the jobs they released.

    Their doorbells are rung once committed, but for those ``held`` says the caller claims
    itself (jobs.batches: the message that ended them claims as many again, and rings for
    what it leaves).
    """
    ended = [job.pk for job in jobs if job.workflow_id is not None and job.status in FINISHED]
    released = _released(_mark_done(ended) if ended else [])
    _ring_on_commit(released, held)
    return released


def _ring_on_commit(released: list[Job], held: Callable[[Job], bool] | None) -> None:
    rung = [job for job in released if held is None or not held(job)]
    if rung:
        publish_on_commit(rung)


def end_and_advance(
    statement: str, params: list, job_ids: list[int], held: Callable[[Job], bool] | None = None
) -> tuple[list, list[Job]]:
    """Run ``statement`` (an end of runs of ``job_ids``), then ``advance`` the workflows of
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
    rows, released = prepared.once_more_as_text(
        lambda: _end_and_advance(statement, params, job_ids)
    )
    _ring_on_commit(released, held)  # committed: at once, a failure logged (the sweeper re-sends)
    return rows, released


def _end_and_advance(statement: str, params: list, job_ids: list[int]) -> tuple[list, list[Job]]:
    message = "; ".join(
        (
            "BEGIN",
            prepared.inline(statement),
            prepared.inline(_MARK_ENDED_AND_LOCK),
            prepared.inline(_READY),
        )
    )
    with connection.cursor() as cursor:
        try:
            cursor.execute(message, [*params, job_ids, job_ids, S.WAITING])
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
                cancelled.append(moved.pk)
        ready = _mark_done(cancelled) if cancelled else []
    return released


# Steps 1 and 2 in one statement: the edges are marked (and row-locked) by the CTE before
# the main query locks the dependants, in id order (one lock order for every transaction).
# ``{ended}``: which jobs' edges.
_MARK_AND_LOCK_OF = (
    f"WITH marked AS (UPDATE {EDGES} SET done = true "
    "WHERE dependency_id {ended} AND NOT done RETURNING dependant_id) "
    f"SELECT id, status FROM {JOBS} WHERE id IN (SELECT dependant_id FROM marked) "
    "ORDER BY id FOR NO KEY UPDATE"
)
_MARK_AND_LOCK = {
    "postgresql": _MARK_AND_LOCK_OF.format(ended="= ANY(%s::bigint[])"),
    # SQLite writes one transaction at a time: no lock to take.
    "sqlite": f"UPDATE {EDGES} SET done = true WHERE dependency_id IN ({{ids}}) AND NOT done "
    "RETURNING dependant_id",
}
# Steps 1 and 2 after an end sent in the same message, which answers no ids: the edges of
# those of the jobs that are now finished (a run taken away, or cancelled meanwhile, is not;
# whoever ends it advances it).
_MARK_ENDED_AND_LOCK = _MARK_AND_LOCK_OF.format(
    ended=f"IN (SELECT id FROM {JOBS} WHERE id = ANY(%s::bigint[]) "
    f"AND status IN ({', '.join(repr(str(status)) for status in sorted(FINISHED))}))"
)
# Step 3 for every dependant at once, sent in the same message as steps 1 and 2 where a
# message may carry several statements: a statement of its own (its snapshot taken after
# the locks) that answers the dependants now ready (no edge left not done) with their
# payloads, so a dependant still waiting costs no round trip of its own.
_READY = (
    f"SELECT d.id, d.payload FROM {JOBS} d WHERE d.id IN (SELECT dependant_id "
    f"FROM {EDGES} WHERE dependency_id = ANY(%s::bigint[])) AND d.status = %s "
    f"AND NOT EXISTS (SELECT 1 FROM {EDGES} e WHERE e.dependant_id = d.id AND NOT e.done)"
)


def _mark_done(dependencies: list[int]) -> list[tuple[int, object]]:
    """Mark ``dependencies``' edges done and lock their dependants; return those still
    waiting that may be ready, each with its payload if step 3 already found it ready (sent
    in the same message) or ``ASK`` (``_decide`` asks)."""
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            ids = ", ".join(["%s"] * len(dependencies))
            cursor.execute(_MARK_AND_LOCK["sqlite"].format(ids=ids), dependencies)
            return [(job_id, ASK) for job_id in sorted({row[0] for row in cursor.fetchall()})]
        if not statements.several_per_message():  # steps 1 and 2 alone; 3 per dependant
            cursor.execute(_MARK_AND_LOCK["postgresql"], [dependencies])
            locked = cursor.fetchall()
            return [(job_id, ASK) for job_id, status in locked if status == S.WAITING]
        cursor.execute(
            f"{_MARK_AND_LOCK['postgresql']}; {_READY}", [dependencies, dependencies, S.WAITING]
        )
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
                f"SELECT EXISTS (SELECT 1 FROM {EDGES} WHERE dependant_id = %s AND NOT done), "
                f"(SELECT payload FROM {JOBS} WHERE id = %s AND status = %s)",
                [dependant, dependant, S.WAITING],
            )
            row = cursor.fetchone()
            if row[0] or row[1] is None:
                return None
            payload = row[1]
    condition, members = inputs_of(dependant)
    failed = [member for member in members if _failed(member)]
    if condition == Condition.SUCCESS and failed:
        first = failed[0]
        why = f"dependency job {first['job_id']} ({first['task']}) ended {first['status']}"
        return _cancel(dependant, JobReason.UPSTREAM, why)
    if condition == Condition.FAILURE and not failed:
        return _cancel(dependant, JobReason.NOT_NEEDED, "not needed: every dependency succeeded")
    payload = with_inputs(payload, members)
    now = timezone.now()
    moved = transition(
        Q(pk=dependant),
        S.QUEUED,
        from_=[S.WAITING],
        payload=payload,
        run_after=now,
        published_at=now,
        publish_count=0,
        defer=("payload",),  # just written, and big: the callback's members
    )
    if moved:
        log_job("workflow.released", moved[0], workflow=moved[0].workflow_id)
        return moved[0]
    return None


def _failed(member: dict) -> bool:
    """Whether a dependency's end counts as a failure: not a success, nor a callback that
    was not needed (its condition did not hold, nothing failed)."""
    return member["status"] != S.SUCCEEDED and member["reason"] != JobReason.NOT_NEEDED


def with_inputs(payload, members: list[dict]) -> dict:
    """``payload`` with its dependencies' outcomes: ``"members"``, and ``"previous"`` when
    there is one dependency."""
    payload = _loads(payload)
    payload[MEMBERS_KEY] = members
    if len(members) == 1:
        payload[PREVIOUS_KEY] = members[0]["result"]
    return payload


def inputs_of(dependant: int) -> tuple[str, list[dict]]:
    """Return ``dependant``'s condition and its dependencies' outcomes, in declared order."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.condition, j.id, j.task, j.status, j.reason, j.result, j.last_error "
            f"FROM {EDGES} e JOIN {JOBS} j ON j.id = e.dependency_id "
            "WHERE e.dependant_id = %s ORDER BY e.id",
            [dependant],
        )
        rows = cursor.fetchall()
    condition = rows[0][0] if rows else Condition.COMPLETE
    members = [
        {
            "job_id": job_id,
            "task": task,
            "status": status,
            "reason": reason,
            "result": _loads(result) if result is not None else None,
            "error": (error or None) if status != S.SUCCEEDED else None,
        }
        for _, job_id, task, status, reason, result, error in rows
    ]
    return condition, members


def _cancel(dependant: int, reason: JobReason, why: str) -> Job | None:
    moved = transition(
        Q(pk=dependant), S.CANCELLED, from_=[S.WAITING], reason=reason, last_error=why
    )
    if moved:
        log_job("workflow.cancelled_dependant", moved[0], reason=reason, error=why)
        return moved[0]
    return None


def _loads(value):
    return json.loads(value) if isinstance(value, str | bytes) else value
