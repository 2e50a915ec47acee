"""Per-attempt history: what each attempt of a job did, kept on the job row.

``Job.attempts_history`` is a JSON list, oldest first, of::

    {"attempt": 2, "worker": "worker@host/4711", "started_at": "...", "finished_at": "...",
     "outcome": "retrying", "reason": "error",
     "error": {"class_path": "builtins.ValueError", "message": "...", "traceback": "..."}}

``outcome`` is the status the attempt left the job in (``succeeded``, ``retrying``,
``cancelled``, ``dead``); ``reason`` is a ``JobReason`` (empty on success); ``error`` is None
unless the attempt raised. A snooze is not an attempt and adds no entry.

An entry is appended by ``append_sql`` inside the one UPDATE that ends the run (jobs.completer),
built from the row's own ``attempts``, ``locked_by`` and ``started_at`` (SQL evaluates every
SET expression against the old row), so the history costs no statement of its own.
"""

import json
import traceback as tb
from datetime import UTC, datetime

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from project.redaction import redact_text

MESSAGE_LIMIT = 2000
TRACEBACK_LIMIT = 8000


def error_info(exc: BaseException | None, *, message: str | None = None) -> dict | None:
    """Describe ``exc`` as ``{class_path, message, traceback}``, each bounded in size.

    A URL's password in the message or the traceback is masked before it is stored
    (``project.redaction``): the history is shown on the job page and by the API.
    """
    if exc is None:
        if message is None:
            return None
        return {"class_path": "", "message": storable(message)[:MESSAGE_LIMIT], "traceback": ""}
    cls = type(exc)
    text = "".join(tb.format_exception(cls, exc, exc.__traceback__))
    if len(text) > TRACEBACK_LIMIT:  # keep the end: the frame that raised and the message
        text = "…" + text[-TRACEBACK_LIMIT:]
    return {
        "class_path": f"{cls.__module__}.{cls.__qualname__}",
        "message": storable(message if message is not None else error_text(exc))[:MESSAGE_LIMIT],
        "traceback": storable(text),
    }


def storable(text: str) -> str:
    """``text`` as a database can store it and anyone may read it: NUL and lone surrogates
    shown escaped, a URL's password masked."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return redact_text(text.replace("\x00", "\\x00"))


def error_text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ raises must still be recorded
        return f"<{type(exc).__name__} whose str() failed>"


def describe(error: dict | None) -> str:
    """Return the one-line ``last_error`` text for an error entry."""
    if not error:
        return ""
    name = error["class_path"].rsplit(".", 1)[-1]
    return f"{name}: {error['message']}" if name else error["message"]


# The one history builder: ``attempts_history`` plus an entry for the run an UPDATE ends.
# By default the entry's start is the row's ``started_at`` and its other values are
# parameters: finished_at, outcome, reason and the error as JSON text (or NULL); a grouped
# end (jobs.statements) passes column expressions instead.
_APPEND_SQL = {
    "postgresql": (
        "COALESCE(attempts_history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object("
        "'attempt', attempts, 'worker', locked_by, 'started_at', {started}, "
        "'finished_at', {finished}, 'outcome', {outcome}, 'reason', {reason}, "
        "'error', {error}))"
    ),
    "sqlite": (
        "json_insert(COALESCE(attempts_history, '[]'), '$[#]', json_object("
        "'attempt', attempts, 'worker', locked_by, 'started_at', {started}, "
        "'finished_at', {finished}, 'outcome', {outcome}, 'reason', {reason}, "
        "'error', json({error})))"
    ),
}
_PARAMETERS = {
    "postgresql": {
        "finished": "%s::timestamptz",
        "outcome": "%s::text",
        "reason": "%s::text",
        "error": "%s::jsonb",
    },
    "sqlite": {"finished": "%s", "outcome": "%s", "reason": "%s", "error": "%s"},
}


def append_sql(vendor: str, **values: str) -> str:
    """Return the SQL expression that appends the ending run to ``attempts_history``.

    ``values`` replace the entry's default expressions (``started``, ``finished``,
    ``outcome``, ``reason``, ``error``) with others, such as a joined row's columns.
    """
    try:
        template = _APPEND_SQL[vendor]
    except KeyError:
        raise NotImplementedError(f"attempt history is not written on {vendor}") from None
    return template.format(**{"started": "started_at", **_PARAMETERS[vendor], **values})


def _when(value) -> datetime | None:
    if not value:
        return None
    parsed = parse_datetime(str(value))
    if parsed is not None and timezone.is_naive(parsed):  # SQLite keeps naive UTC
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def history(job) -> list[dict]:
    """Return ``job``'s attempts, oldest first, with their times parsed."""
    entries = job.attempts_history or []
    if isinstance(entries, str):
        entries = json.loads(entries)
    return [
        {
            "attempt": entry.get("attempt"),
            "worker": entry.get("worker") or "",
            "started_at": _when(entry.get("started_at")),
            "finished_at": _when(entry.get("finished_at")),
            "outcome": entry.get("outcome") or "",
            "reason": entry.get("reason") or "",
            "error": entry.get("error"),
        }
        for entry in entries
    ]
