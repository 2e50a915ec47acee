"""The engine's hottest statements, prepared once per database connection (PostgreSQL).

A claim's statement is parsed and planned in about as long as it runs: 1.2 ms a claim as
text against 0.5 ms as ``EXECUTE`` of its prepared generic plan (docs/benchmarks.md). So a
connection prepares each hot statement the first time it runs it outside a transaction
(``PREPARE conveyor_<name>_<checksum of its text>``; until then, and inside a transaction,
the text is sent as before) and then sends ``EXECUTE conveyor_<name>_<checksum>(…)`` with
the same parameters, bound the way every other statement is. The same first message sets the
session's ``plan_cache_mode`` to ``force_generic_plan``: these statements' plans do not
depend on their parameters (a claim's queue comes from its job's row either way), and Django
prepares no statement of its own, so nothing else on the connection is affected.

``CONVEYOR_PREPARED_STATEMENTS=false`` sends the text every time, for a connection pooler in
transaction mode that does not keep a session's prepared statements. A connection whose
statement the server lost, or whose ``PREPARE`` is refused (a statement of that name already
there: a pooler mixing sessions), sends the text for the rest of its life and logs
``jobs.prepared_statements_off`` once.
"""

import logging
import re
import zlib

from django.db import ProgrammingError, connection

from jobs import conf

logger = logging.getLogger("jobs")
_PLACEHOLDER = re.compile(r"%(s|%)")
_LOST = "26000"  # invalid_sql_statement_name: the server lost it (a pooler mixing sessions)


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
    except ProgrammingError as exc:
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
    """Whether ``exc`` says the server lost a prepared statement (this connection then sends
    text from now on)."""
    if getattr(exc.__cause__, "sqlstate", None) != _LOST:
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
    connection.ensure_connection()
    raw = connection.connection
    held = getattr(connection, "_conveyor_prepared", None)
    if held is None or held[0] is not raw:  # a new connection prepares afresh
        held = (raw, set())
        connection._conveyor_prepared = held
    return held[1]


def _give_up_here(exc: Exception) -> None:
    """Send text for the rest of this connection's life: its session is not its own."""
    connection._conveyor_prepared = (connection.connection, None)
    logger.warning(
        "jobs.prepared_statements_off",
        extra={
            "reason": str(exc).splitlines()[0][:200],
            "hint": "a connection pooler in transaction mode: CONVEYOR_PREPARED_STATEMENTS=false",
        },
    )


def _outside_transaction() -> bool:
    return connection.get_autocommit() and not connection.in_atomic_block
