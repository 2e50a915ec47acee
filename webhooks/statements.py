"""Write rows of several tables in one database round trip, all or nothing.

``execute_together()`` takes INSERT and UPDATE statements (``insert()``, ``update_row()``)
and runs them atomically:

* on PostgreSQL as **one** statement: the last statement is the main one and every other
  becomes a data-modifying ``WITH`` clause. PostgreSQL runs each clause exactly once and to
  completion, on the same snapshot, inside the one statement's transaction. The main
  statement runs first and the clauses after it, so the main statement's rows are the first
  ones locked;
* on any other database (SQLite) one after another inside ``transaction.atomic()``.

The clauses of one statement do not see each other's changes, so the statements must touch
different rows. The delivery hot path uses it to record an attempt with one round trip
instead of five (BEGIN, INSERT, UPDATE, UPDATE, COMMIT).

``insert()`` and ``update_row()`` write their SQL once per model and shape and then only
convert the values, as the ORM would (``get_db_prep_save``): on the hot path, building the
same statements through the ORM at every attempt cost more CPU than running them.
"""

from functools import cache

from django.db import connections, transaction
from django.db.models import Field, Model

Statement = tuple[str, tuple]


def insert(obj: Model, *, using: str = "default") -> Statement:
    """The INSERT that ``obj.save()`` would run; the database picks the primary key."""
    sql, fields = _insert_sql(type(obj), using)
    connection = connections[using]
    return sql, tuple(
        field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields
    )


@cache
def _insert_sql(model: type[Model], using: str) -> tuple[str, tuple[Field, ...]]:
    meta = model._meta
    fields = tuple(
        field
        for field in meta.local_concrete_fields
        if not field.generated and field is not meta.auto_field
    )
    quote = connections[using].ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    values = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({values})", fields


def update_row(
    model: type[Model], pk, changes: dict, *, guard: str = "", using: str = "default"
) -> Statement:
    """``model.objects.filter(pk=pk).update(**changes)``, and only if ``guard`` holds.

    ``guard`` is a constant SQL condition on the row (``"consecutive_dead" > 0``), part of
    the statement's shape: the SQL is written once per (model, changed fields, guard).
    """
    sql, fields = _update_sql(model, tuple(changes), guard, using)
    connection = connections[using]
    params = [
        field.get_db_prep_save(value, connection)
        for field, value in zip(fields, changes.values(), strict=True)
    ]
    params.append(model._meta.pk.get_db_prep_value(pk, connection))
    return sql, tuple(params)


@cache
def _update_sql(
    model: type[Model], names: tuple[str, ...], guard: str, using: str
) -> tuple[str, tuple[Field, ...]]:
    meta = model._meta
    fields = tuple(meta.get_field(name) for name in names)
    quote = connections[using].ops.quote_name
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    where = f"{quote(meta.pk.column)} = %s" + (f" AND ({guard})" if guard else "")
    return f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {where}", fields


def execute_together(statements: list[Statement], *, using: str = "default") -> int:
    """Run ``statements`` all or nothing; return how many rows the last one changed."""
    if not statements:
        raise ValueError("execute_together() needs at least one statement")
    connection = connections[using]
    if connection.vendor == "postgresql":
        *clauses, (sql, _) = statements
        if clauses:
            prefix = ", ".join(f"s{n} AS ({clause})" for n, (clause, _) in enumerate(clauses))
            sql = f"WITH {prefix} {sql}"
        params = [param for _, statement_params in statements for param in statement_params]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount
    with transaction.atomic(using=using), connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute(sql, params)
        return cursor.rowcount
