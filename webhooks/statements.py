"""Write rows of several tables in one database round trip, all or nothing.

``execute_together()`` takes INSERT and UPDATE statements compiled by the ORM (``insert()``,
``update()``) and runs them atomically:

* on PostgreSQL as **one** statement: the last statement is the main one and every other
  becomes a data-modifying ``WITH`` clause. PostgreSQL runs each clause exactly once and to
  completion, on the same snapshot, inside the one statement's transaction. The main
  statement runs first and the clauses after it, so the main statement's rows are the first
  ones locked;
* on any other database (SQLite) one after another inside ``transaction.atomic()``.

The clauses of one statement do not see each other's changes, so the statements must touch
different rows. The delivery hot path uses it to record an attempt with one round trip
instead of five (BEGIN, INSERT, UPDATE, UPDATE, COMMIT).
"""

from django.db import connections, transaction
from django.db.models import Model, QuerySet
from django.db.models.sql import InsertQuery, UpdateQuery

Statement = tuple[str, tuple]


def insert(obj: Model, *, using: str = "default") -> Statement:
    """Compile the INSERT that ``obj.save()`` would run; the database picks the primary key."""
    meta = obj._meta
    fields = [
        field
        for field in meta.local_concrete_fields
        if not field.generated and field is not meta.auto_field
    ]
    query = InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    (statement,) = query.get_compiler(using=using).as_sql()
    return statement


def update(queryset: QuerySet, changes: dict) -> Statement:
    """Compile ``queryset.update(**changes)`` without running it."""
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(changes)
    sql, params = query.get_compiler(queryset.db).as_sql()
    return sql, tuple(params)


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
