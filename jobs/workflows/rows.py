"""The rows a workflow is written as: one job per node, the edges in one statement, and the
``started_by`` key of what started it."""

import re

from celery import Task
from django.db import connection
from django.db.models import Model

from jobs.models import Job, JobDependency, JobStatus
from jobs.services.enqueue import (
    _limit_key,
    _task_defaults,
    placement,
    validate_payload,
    validate_priority,
)
from jobs.workflows.errors import WorkflowError

S = JobStatus
OPTIONS = frozenset({"queue", "priority", "max_attempts"})

# The id without leading zeros: the key is matched as written (``deployment:12``).
_STARTED_BY = re.compile(r"[a-z][a-z0-9_]{0,49}:[1-9][0-9]{0,18}")


def started_by_key(origin) -> str:
    """``"kind:id"`` for what started a workflow: a saved model instance (its model's name
    and key, e.g. ``deployment:12``), such a string itself, or None (nothing: ``""``)."""
    if origin is None:
        return ""
    if isinstance(origin, Model):
        if origin.pk is None:
            raise WorkflowError(f"started_by: {origin!r} is not saved (it has no id)")
        origin = f"{origin._meta.model_name}:{origin.pk}"
    if not isinstance(origin, str) or not _STARTED_BY.fullmatch(origin):
        raise WorkflowError(
            f"started_by: {origin!r} is neither a saved model instance nor 'kind:id' "
            "(e.g. 'deployment:12')"
        )
    return origin


def job_row(node, waits: bool, now, defaults: dict) -> Job:
    """An unsaved job for ``node``: ``waiting`` when it has dependencies, else ``queued``."""
    step = node.step
    task = step.task
    if isinstance(task, Task):
        task = task.name
    if not isinstance(task, str) or not task:
        raise WorkflowError(f"node {node.key!r}: {task!r} is not a task")
    try:
        if task not in defaults:
            defaults[task] = _task_defaults(task)
        name, queue, declared_attempts, rule, limit = defaults[task]
        payload = validate_payload(step.payload)
        priority = validate_priority(step.options.get("priority", 0))
        queue, max_attempts = placement(
            step.options.get("queue"), queue, step.options.get("max_attempts"), declared_attempts
        )
    except ValueError as exc:
        raise WorkflowError(f"node {node.key!r}: {exc}") from None
    if rule is not None:
        raise WorkflowError(
            f"node {node.key!r}: task {name!r} is unique; a workflow's jobs cannot be unique"
        )
    unknown = set(step.options) - OPTIONS
    if unknown:
        raise WorkflowError(f"node {node.key!r}: unknown option(s) {sorted(unknown)}")
    return Job(
        task=name,
        queue=queue,
        payload=payload,
        status=S.WAITING if waits else S.QUEUED,
        limit_key=_limit_key(limit, payload),
        priority=priority,
        max_attempts=max_attempts,
        run_after=now,
        published_at=now,
        created_at=now,
        updated_at=now,
    )


def edges(order: list, deps: dict, ids: dict, default: str) -> list[tuple]:
    """The edges ``(dependant, dependency, condition, range_start, range_end)`` of nodes in
    topological ``order`` whose jobs have ``ids``: a range edge (no dependency, see
    JobDependency) for the dependencies of a node that are two or more jobs written one after
    another, in the declared order, and overlap no other node's range (a group's members,
    which every callback of that group shares); else one edge per dependency. The jobs' ids
    follow ``order`` (one bulk insert), so no other job of the workflow lies inside a range.
    PostgreSQL only: on SQLite, one edge per dependency."""
    written = [ids[node] for node in order]
    ranged = connection.vendor == "postgresql" and all(map(int.__lt__, written, written[1:]))
    position = {node: index for index, node in enumerate(order)} if ranged else {}
    owner: dict[int, tuple[int, int]] = {}  # a position taken by a range: that range
    rows: list[tuple] = []
    for node in order:
        found = deps[node]
        if not found:
            continue
        condition = node.condition or default
        span = _span(found, position, owner) if ranged and len(found) > 1 else None
        if span is not None:
            rows.append((ids[node], None, condition, ids[found[0]], ids[found[-1]]))
            continue
        rows.extend((ids[node], ids[dependency], condition, None, None) for dependency in found)
    return rows


def _span(found, position: dict, owner: dict) -> tuple[int, int] | None:
    """``found``'s positions as a range, if they follow one another and overlap no range
    already taken but their own; taken then."""
    first = position[found[0]]
    span = (first, first + len(found) - 1)
    for offset, dependency in enumerate(found):
        at = position[dependency]
        if at != first + offset or owner.get(at, span) != span:
            return None
    if span[0] not in owner:
        for at in range(span[0], span[1] + 1):
            owner[at] = span
    return span


def insert_edges(workflow_id: int, edges: list[tuple]) -> None:
    if not edges:
        return
    if connection.vendor == "postgresql":  # one statement, however many edges
        table = JobDependency._meta.db_table
        # Array literals written here: a client-side cursor quotes a list element by element,
        # slower than the insert itself for a 10,000-member chord. Every element is an int,
        # NULL or a Condition value (a plain word).
        arrays = [
            "{" + ",".join("NULL" if value is None else str(value) for value in column) + "}"
            for column in zip(*edges, strict=True)
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} "
                "(workflow_id, dependant_id, dependency_id, condition, range_start, range_end, "
                "done) SELECT %s, d, p, c, s, r, false FROM unnest(%s::bigint[], %s::bigint[], "
                "%s::varchar[], %s::bigint[], %s::bigint[]) AS e(d, p, c, s, r)",
                [workflow_id, *arrays],
            )
        return
    JobDependency.objects.bulk_create(
        [
            JobDependency(
                workflow_id=workflow_id,
                dependant_id=d,
                dependency_id=p,
                condition=c,
                range_start=s,
                range_end=r,
            )
            for d, p, c, s, r in edges
        ],
        batch_size=500,
    )
