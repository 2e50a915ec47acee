"""Structured logging: every record becomes one JSON object on one line."""

import json
import logging
import os
import sys
from datetime import UTC, datetime

from project.redaction import redact_text

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is data.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """Format a record as ``{"ts", "level", "logger", "event", ...extra}``."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": redact_text(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = redact_text(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["exc"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


# Commands whose stdout is their answer (a table, JSON) for a person or a script to read.
ANSWER_COMMANDS = frozenset({"queue", "queue_stats", "tasks"})


def log_stream() -> str:
    """Where this process's log lines go (the ``stream`` of LOGGING's handler): stdout, but
    stderr for ``manage.py`` running one of ``ANSWER_COMMANDS``, whose stdout is the answer
    (from the first line on: settings warn while they load). ``call_command`` leaves the
    caller's logging as it is."""
    argv = sys.argv
    if len(argv) > 1 and os.path.basename(argv[0]) == "manage.py" and argv[1] in ANSWER_COMMANDS:
        return "ext://sys.stderr"
    return "ext://sys.stdout"


# The schedule tick (``maintenance.fire_schedules``, every CONVEYOR_SCHEDULE_TICK: 1s) is sent
# by beat and run by a worker all day; its runs are recorded as MaintenanceRun rows.
TICK_TASK = "maintenance.fire_schedules"


class QuietTicks(logging.Filter):
    """Beat's "Sending due task" line for the schedule tick (one a second, all day) is a
    DEBUG line: shown only when the logs are at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or TICK_TASK not in (record.args or ()):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger().isEnabledFor(logging.DEBUG)
