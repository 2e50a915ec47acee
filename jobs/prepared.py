"""The engine's hottest statements, prepared once per database connection (PostgreSQL).

A claim's statement is parsed and planned in about as long as it runs: 1.2 ms a claim as
text against 0.5 ms as ``EXECUTE`` of its prepared generic plan (docs/benchmarks.md). So a
connection prepares each hot statement the first time it runs it outside a transaction
(``PREPARE conveyor_<name>_<checksum of its text>``; until then, and inside a transaction,
the text is sent as before) and then sends ``EXECUTE conveyor_<name>_<checksum>(…)`` with
the same parameters, bound the way every other statement is. The same first message sets the
session's ``plan_cache_mode`` to ``force_generic_plan``: these statements' plans do not
depend on their parameters (a claim's queue comes from its job's row either way; left at
``auto`` the server kept planning each call). The setting is the session's: Django prepares
no statement of its own, but cached plans of PL/pgSQL functions run on that connection (the
accounting triggers, a task body's own functions) are generic too.

``CONVEYOR_PREPARED_STATEMENTS=false`` sends the text every time: behind any connection
pooler in transaction mode (PgBouncer's ``max_prepared_statements`` tracks protocol-level
statements, not SQL ``PREPARE``), or with ``server_side_binding`` (where nothing is done
here either). A connection whose statement the server lost or whose statement went stale (a
migration changed a column it returns), or whose ``PREPARE`` is refused (a statement of that
name already there), sends the text for the rest of its life and logs
``jobs.prepared_statements_off``.
"""

import logging
import re
import zlib

from django.db import NotSupportedError, ProgrammingError, connection

from jobs import conf

logger = logging.getLogger("jobs")
_PLACEHOLDER = re.compile(r"%(s|%)")
# The server lost the statement (invalid_sql_statement_name: a pooler mixing sessions), or a
# migration changed a column it returns ("cached plan must not change result type").
_STALE = {"26000", "0A000"}


def execute(cursor, name: str, sql: str, params: list) -> None:
    """Run ``sql`` (``%s`` placeholders) with ``params`` on ``cursor`` (Django's), as the
    prepared statement ``name`` where it can be."""
    prepared = _prepared_here()
    name = _name(name, sql)
    if prepared is None or (name not in prepared and not _outside_transaction()):
        cursor.execute(sql, params)  # a failed PREPARE must not abort the caller's work
        return
    if name not in prepared:
        try:
            cursor.execute(f"SET plan_cache_mode = force_generic_plan; {_prepare(name, sql)}")
        except ProgrammingError as exc:  # outside a transaction: nothing else failed with it
            _give_up_here(exc)
            cursor.execute(sql, params)
            return
        prepared.add(name)
    try:
        cursor.execute(f"EXECUTE {name}({', '.join(['%s'] * len(params))})", params)
    except (ProgrammingError, NotSupportedError) as exc:
        if not lost(exc):
            raise
        if not _outside_transaction():
            raise  # the caller's transaction failed with it
        cursor.execute(sql, params)


def inline(name: str, sql: str) -> str:
    """``sql`` to send among other statements in one message, with the same parameters:
    ``EXECUTE`` of its prepared form where this connection has it or can prepare it now
    (outside a transaction: a round trip, once), else the text itself."""
    prepared = _prepared_here()
    if prepared is None:
        return sql
    name = _name(name, sql)
    if name not in prepared:
        if not _outside_transaction():
            return sql
        with connection.cursor() as cursor:
            try:
                cursor.execute(f"SET plan_cache_mode = force_generic_plan; {_prepare(name, sql)}")
            except ProgrammingError as exc:
                _give_up_here(exc)
                return sql
        prepared.add(name)
    count = sum(1 for mark in _PLACEHOLDER.findall(sql) if mark == "s")
    return f"EXECUTE {name}({', '.join(['%s'] * count)})"


def lost(exc: Exception) -> bool:
    """Whether ``exc`` says a prepared statement is lost or stale (this connection then
    sends text from now on: it is replaced within ``CONN_MAX_AGE``, and a new one prepares
    afresh)."""
    if getattr(exc.__cause__, "sqlstate", None) not in _STALE:
        return False
    _give_up_here(exc)
    return True


def _name(name: str, sql: str) -> str:
    return f"conveyor_{name}_{zlib.crc32(sql.encode()):08x}"  # one name, one text


def _prepare(name: str, sql: str) -> str:
    numbers = iter(range(1, 10_000))
    text = _PLACEHOLDER.sub(lambda m: f"${next(numbers)}" if m.group(1) == "s" else "%", sql)
    return f"PREPARE {name} AS {text}"


def _prepared_here() -> set[str] | None:
    """The names prepared on the current connection, or None where none may be."""
    if connection.vendor != "postgresql" or not conf.get().prepared_statements:
        return None
    if connection.settings_dict.get("OPTIONS", {}).get("server_side_binding"):
        return None  # psycopg binds and may prepare by itself; EXECUTE takes no $n there
    connection.ensure_connection()
    raw = connection.connection
    held = getattr(connection, "_conveyor_prepared", None)
    if held is None or held[0] is not raw:  # a new connection prepares afresh
        held = (raw, set())
        connection._conveyor_prepared = held
    return held[1]


def _give_up_here(exc: Exception) -> None:
    """Send text for the rest of this connection's life (a new one prepares afresh)."""
    connection._conveyor_prepared = (connection.connection, None)
    logger.warning(
        "jobs.prepared_statements_off",
        extra={
            "reason": str(exc).splitlines()[0][:200],
            "hint": "a migration changed the table, or a pooler in transaction mode "
            "(then set CONVEYOR_PREPARED_STATEMENTS=false)",
        },
    )


def _outside_transaction() -> bool:
    return connection.get_autocommit() and not connection.in_atomic_block
