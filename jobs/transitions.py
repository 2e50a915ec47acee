"""The one place a Job changes state: a conditional UPDATE guarded by TRANSITIONS.

``transition()`` moves every job matching ``where`` whose current status may legally move to
``to`` and returns the rows as they are after the UPDATE (``UPDATE ... RETURNING``, one
statement). An empty list means a lost race or a move the current status does not allow;
callers decide which of the two that is, never silence.
"""

from collections.abc import Iterable

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Q
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from jobs.errors import IllegalTransition
from jobs.models import FINISHED, TRANSITIONS, Job, JobStatus


def sources_of(to: str) -> frozenset[str]:
    """Return every status from which ``to`` may be reached."""
    return frozenset(src for src, targets in TRANSITIONS.items() if to in targets)


def transition(
    where: Q,
    to: JobStatus,
    *,
    from_: Iterable[str] | None = None,
    using: str = "default",
    **changes,
) -> list[Job]:
    """Move the jobs matching ``where`` to ``to``; return them as they are now.

    ``from_`` narrows the allowed source states; naming a source that TRANSITIONS does not
    allow raises IllegalTransition. Every move stamps ``updated_at``; entering ``running``
    stamps ``started_at`` and entering a final state stamps ``finished_at``.
    """
    allowed = sources_of(to)
    sources = allowed if from_ is None else frozenset(from_)
    if not sources or not sources <= allowed:
        raise IllegalTransition(f"{sorted(sources - allowed) or '[]'} -> {to} is not allowed")
    now = timezone.now()
    changes = {"status": to, "updated_at": now, **changes}
    if to == JobStatus.RUNNING:
        changes.setdefault("started_at", now)
    if to in FINISHED:
        changes.setdefault("finished_at", now)
        changes.setdefault("lease_expires_at", None)
    queryset = Job.objects.using(using).filter(where, status__in=sources)
    return update_returning(queryset, changes)


def update_returning(queryset, changes: dict) -> list:
    """Run ``queryset.update(**changes)`` as one UPDATE ... RETURNING; return the rows.

    Works for any model (deployments uses it for its own state machine).
    """
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(changes)
    connection = connections[queryset.db]
    compiler = query.get_compiler(queryset.db)
    try:
        sql, params = compiler.as_sql()
    except EmptyResultSet:  # e.g. ``pk__in=[]``: nothing can match
        return []
    if not sql:
        return []
    model = queryset.model
    fields = model._meta.concrete_fields
    columns = [field.get_col(model._meta.db_table) for field in fields]
    quote = connection.ops.quote_name
    returning = ", ".join(quote(field.column) for field in fields)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {returning}", params)
        rows = cursor.fetchall()
    converters = compiler.get_converters(columns)
    if converters:
        rows = compiler.apply_converters(rows, converters)
    names = [field.attname for field in fields]
    return [model.from_db(queryset.db, names, row) for row in rows]
