"""The engine's hottest statements, prepared once per database connection (PostgreSQL).

A claim's statement is parsed and planned in about as long as it runs: 1.2 ms a claim as
text against 0.5 ms as ``EXECUTE`` of its prepared generic plan (docs/benchmarks.md). So the
default connection prepares each hot statement the first time it sends it outside a
transaction (``PREPARE conveyor_<checksum of its text>``: the same text always gets the same
name, a changed text a new one, so two versions of Conveyor never share one) and from then on
sends ``EXECUTE conveyor_<checksum>(…)``, inside transactions too, with the same parameters,
bound the way every other statement is. Before a statement is prepared, a transaction sends
its text (a failed ``PREPARE`` must not abort the caller's work). The same first message sets
the session's ``plan_cache_mode`` to ``force_generic_plan``: these statements' plans do not
depend on their parameters (a claim's queue comes from its job's row either way; left at
``auto`` the server kept planning each call). The setting is the session's: Django prepares
no statement of its own, but cached plans of PL/pgSQL functions run on that connection (the
accounting triggers, a task body's own functions) are generic too.

``CONVEYOR_PREPARED_STATEMENTS=false`` sends the text every time, as it must behind any
connection pooler in transaction mode (PgBouncer's ``max_prepared_statements`` tracks
protocol-level statements, not SQL ``PREPARE``). With ``server_side_binding`` this module
does nothing. A connection that finds a statement lost (the server does not know it), stale
(a migration changed a column it returns) or refused (any error of its ``PREPARE``, such as
a statement of that name already there) sends the text for the rest of its life and logs
``job.prepared_statements_off``; the call that found it is sent again as text, unless it was
inside a transaction, which that error aborted: then it fails, as any database error would.
A new connection (within ``CONN_MAX_AGE``) prepares afresh. The names prepared on a
connection are kept on Django's connection object (``_conveyor_prepared``, per thread).
"""

import itertools
import logging
import re
import zlib
from collections.abc import Callable

from django.db import NotSupportedError, ProgrammingError, connection

from jobs import conf

logger = logging.getLogger("jobs")
_PLACEHOLDER = re.compile(r"%(s|%)")
_LOST = "26000"  # invalid_sql_statement_name: the server does not know it (a pooler)
_STALE = ("0A000", "cached plan must not change result type")  # after a migration


def execute(cursor, sql: str, params: list) -> None:
    """Run ``sql`` (``%s`` placeholders) with ``params`` on ``cursor`` (the default
    connection's), as its prepared statement where it can be."""

    def send() -> None:
        name = _prepared_name(sql)
        marks = ", ".join(["%s"] * len(params))
        cursor.execute(sql if name is None else f"EXECUTE {name}({marks})", params)

    once_more_as_text(send)


def inline(sql: str) -> str:
    """``sql`` to send among other statements in one message, with the same parameters:
    ``EXECUTE`` of its prepared form where it can be, else the text itself."""
    name = _prepared_name(sql)
    if name is None:
        return sql
    count = sum(1 for mark in _PLACEHOLDER.findall(sql) if mark == "s")
    return f"EXECUTE {name}({', '.join(['%s'] * count)})"


def _prepared_name(sql: str) -> str | None:
    """The name ``sql`` is prepared under on this connection, preparing it now if it may be
    (outside a transaction: a failed ``PREPARE`` must not abort the caller's work; one round
    trip, once); None: send the text."""
    prepared = _prepared_here()
    if prepared is None:
        return None
    name = name_of(sql)
    if name in prepared:
        return name
    if not _outside_transaction():
        return None
    with connection.cursor() as cursor:
        try:
            cursor.execute(f"SET plan_cache_mode = force_generic_plan; {_prepare(name, sql)}")
        except ProgrammingError as exc:  # outside a transaction: nothing else failed with it
            _give_up_here(exc)
            return None
    prepared.add(name)
    return name


def once_more_as_text[T](
    send: Callable[[], T], *, before_again: Callable[[], None] | None = None
) -> T:
    """Run ``send``: one message, or one transaction, that may use this connection's prepared
    statements and is rolled back whole if it fails. If the server lost or outdated one of
    them (``may_send_as_text``), nothing was written: call ``before_again`` (to undo what
    ``send`` changed in memory), then ``send`` once more, which this connection now sends
    as text."""
    try:
        return send()
    except (ProgrammingError, NotSupportedError) as exc:
        if not may_send_as_text(exc):
            raise
    if before_again is not None:
        before_again()
    return send()


def may_send_as_text(exc: Exception) -> bool:
    """After ``exc`` from a message that used this connection's prepared statements: whether
    the caller may send it again as text. Yes when a statement was lost or stale (this
    connection sends text from now on) and no transaction of the caller's failed with it."""
    return _give_up_if_lost(exc) and _outside_transaction()


def _give_up_if_lost(exc: Exception) -> bool:
    """If ``exc`` says a prepared statement is lost or stale, send text on this connection
    from now on and answer True."""
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate != _LOST and (sqlstate, _STALE[1]) != (_STALE[0], _message(cause)):
        return False
    _give_up_here(exc)
    return True


def name_of(sql: str) -> str:
    """The name ``sql`` is prepared under: a checksum of its text."""
    return f"conveyor_{zlib.crc32(sql.encode()):08x}"


def _message(exc) -> str | None:
    diag = getattr(exc, "diag", None)
    return getattr(diag, "message_primary", None)


def _prepare(name: str, sql: str) -> str:
    numbers = itertools.count(1)
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
    if getattr(connection, "_conveyor_prepared", None) == (connection.connection, None):
        return  # said already (a caller retrying what failed inside its transaction)
    connection._conveyor_prepared = (connection.connection, None)
    logger.warning(
        "job.prepared_statements_off",
        extra={
            "reason": str(exc).splitlines()[0][:200],
            "hint": "a migration changed the table, or a pooler in transaction mode "
            "(then set CONVEYOR_PREPARED_STATEMENTS=false)",
        },
    )


def _outside_transaction() -> bool:
    return connection.get_autocommit() and not connection.in_atomic_block
