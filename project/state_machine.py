"""What the jobs, deployments and webhooks state machines share: checking a move against a
table of allowed moves, and a guarded UPDATE that returns the rows it changed.

Each app's ``transitions`` module keeps its own table, its timestamps and its error; a move
is allowed only from the sources its table lists for the target.
"""

from collections.abc import Iterable, Mapping

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models.sql import UpdateQuery


def sources_of(table: Mapping[str, Iterable[str]], to: str) -> frozenset[str]:
    """Return every status of ``table`` from which ``to`` may be reached."""
    return frozenset(src for src, targets in table.items() if to in targets)


def allowed_sources(
    table: Mapping[str, Iterable[str]],
    to: str,
    from_: Iterable[str] | None,
    error: type[Exception],
) -> frozenset[str]:
    """The sources a move to ``to`` may start from (``from_`` narrows them); ``error``
    (naming what is not allowed) when ``from_`` names one the table does not allow."""
    allowed = sources_of(table, to)
    sources = allowed if from_ is None else frozenset(from_)
    if not sources or not sources <= allowed:
        raise error(f"{sorted(sources - allowed) or '[]'} -> {to} is not allowed")
    return sources


def update_returning(queryset, changes: dict, *, defer: tuple[str, ...] = ()) -> list:
    """Run ``queryset.update(**changes)`` as one UPDATE ... RETURNING; return the rows.

    ``defer``: fields not sent back (read on first access, as a deferred field is): a big
    value the caller just wrote and does not need again.
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
    fields = [field for field in model._meta.concrete_fields if field.name not in defer]
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
