"""What a dependant gets as it is released: its dependencies' outcomes, as JSON text.

Its payload gets ``"members"``: a list of ``{job_id, task, status, reason, result, error}`` in
the order the workflow declared its dependencies (a range's members in id order, which is
theirs), and ``"previous"``: the result of its one dependency when it has exactly one (a
chain's step). A callback of a 10,000-member group gets 10,000 outcomes: on PostgreSQL the
database writes them as one JSON text (``json_agg``), spliced into the payload's text and
written back as it is, so no member's result is decoded and encoded again in Python.
"""

import json
from dataclasses import dataclass

from django.db import connection
from django.db.models.expressions import RawSQL

from jobs.models import Condition, Job, JobDependency, JobReason, JobStatus

S = JobStatus
EDGES = JobDependency._meta.db_table
JOBS = Job._meta.db_table
# A released job's payload keys (documented in docs/jobs.md, Workflows).
MEMBERS_KEY = "members"
PREVIOUS_KEY = "previous"

_COLUMNS = "e.condition, e.id AS edge, j.id, j.task, j.status, j.reason, j.result, j.last_error"
# Its dependencies, an edge at a time, and its range edges marked done as it is decided.
_DEPENDENCIES = (
    f"WITH taken AS (UPDATE {EDGES} SET done = true WHERE dependant_id = %s "
    "AND range_end IS NOT NULL AND NOT done), "
    f"dependencies AS (SELECT {_COLUMNS} FROM {EDGES} e JOIN {JOBS} j ON j.id = e.dependency_id "
    "WHERE e.dependant_id = %s "
    f"UNION ALL SELECT {_COLUMNS} FROM {EDGES} e JOIN {JOBS} j "
    "ON j.workflow_id = e.workflow_id AND j.id >= e.range_start AND j.id <= e.range_end "
    "WHERE e.dependant_id = %s AND e.range_end IS NOT NULL) "
)
# A failure: not a success, nor a callback that was not needed (its condition did not hold,
# nothing failed).
_FAILED = f"status <> '{S.SUCCEEDED}' AND reason <> '{JobReason.NOT_NEEDED}'"
_INPUTS = (
    _DEPENDENCIES + "SELECT min(condition), count(*), coalesce(json_agg(json_build_object("
    "'job_id', id, 'task', task, 'status', status, 'reason', reason, 'result', result, "
    f"'error', CASE WHEN status <> '{S.SUCCEEDED}' THEN NULLIF(last_error, '') END) "
    "ORDER BY edge, id)::text, '[]'), "
    f"(array_agg(json_build_array(id, task, status)::text ORDER BY edge, id) "
    f"FILTER (WHERE {_FAILED}))[1], "
    "CASE WHEN count(*) = 1 THEN coalesce(min(result::text), 'null') END FROM dependencies"
)


@dataclass(frozen=True, slots=True)
class Inputs:
    """A dependant's condition and its dependencies' outcomes."""

    condition: str
    count: int
    members: str  # a JSON array of the outcomes, in declared order
    first_failed: tuple[int, str, str] | None  # (job_id, task, status)
    previous: str | None  # the one dependency's result as JSON text, if there is one

    def payload(self, own) -> str:
        """JSON text: ``own`` (the dependant's payload) with ``"members"`` in place of any it
        had, and ``"previous"`` in place of any it had when there is one dependency."""
        replaced = (MEMBERS_KEY, PREVIOUS_KEY) if self.previous is not None else (MEMBERS_KEY,)
        own = {key: value for key, value in _loads(own).items() if key not in replaced}
        added = f'"{MEMBERS_KEY}": {self.members}'
        if self.previous is not None:
            added += f', "{PREVIOUS_KEY}": {self.previous}'
        text = json.dumps(own)
        return f"{text[:-1]}{', ' if own else ''}{added}}}"


def inputs_of(dependant: int) -> Inputs:
    """Read ``dependant``'s condition and its dependencies' outcomes as it is decided (on
    PostgreSQL, its range edges are marked done in the same statement)."""
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            return _inputs_here(cursor, dependant)
        cursor.execute(_INPUTS, [dependant, dependant, dependant])
        condition, count, members, failed, previous = cursor.fetchone()
    first_failed = tuple(json.loads(failed)) if failed is not None else None
    return Inputs(condition or Condition.COMPLETE, count, members, first_failed, previous)


def _inputs_here(cursor, dependant: int) -> Inputs:
    """``inputs_of`` elsewhere (SQLite, no range edges: jobs.workflows.rows.edges), built in
    Python."""
    cursor.execute(
        "SELECT e.condition, j.id, j.task, j.status, j.reason, j.result, j.last_error "
        f"FROM {EDGES} e JOIN {JOBS} j ON j.id = e.dependency_id WHERE e.dependant_id = %s "
        "ORDER BY e.id",
        [dependant],
    )
    rows = cursor.fetchall()
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
    failed = [
        (member["job_id"], member["task"], member["status"])
        for member in members
        if member["status"] != S.SUCCEEDED and member["reason"] != JobReason.NOT_NEEDED
    ]
    condition = rows[0][0] if rows else Condition.COMPLETE
    previous = json.dumps(members[0]["result"]) if len(members) == 1 else None
    return Inputs(
        condition, len(rows), json.dumps(members), failed[0] if failed else None, previous
    )


def as_stored(text: str) -> RawSQL:
    """A payload's JSON text as an UPDATE's value: stored as it is (a dict handed to the ORM
    would be encoded again)."""
    if connection.vendor == "postgresql":
        return RawSQL("%s::jsonb", (text,))
    return RawSQL("%s", (text,))


def _loads(value):
    return json.loads(value) if isinstance(value, str | bytes) else value
