"""Start-up shared by manage.py, gunicorn and the Celery processes: fail in one line, or wait.

* A bad setting ends the process with one line on stderr naming the variable, its value and
  what is expected, and exit status 2 (``EXIT_BAD_SETTING``), never a traceback.
* ``CONVEYOR_*`` variables that no setting reads are reported in one warning line.
* ``var/`` (0700) and the embedded database (0600) are private; an older install's looser
  modes are tightened by the settings and reported here in one warning line.
* A worker or beat that cannot reach the database or the broker says which, and tries again
  with exponential backoff (1s, 2s, 4s, ... at most ``MAX_BACKOFF_SECONDS``) instead of
  crashing and being restarted in a loop.
"""

import logging
import os
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured

from project.redaction import redact_text

logger = logging.getLogger("conveyor.startup")
EXIT_BAD_SETTING = 2
MAX_BACKOFF_SECONDS = 30


def started_by_celery() -> str | None:
    """Return the Celery command this process runs (``worker``, ``beat``, ...), else None."""
    program = sys.argv[0] if sys.argv else ""
    if os.path.basename(program) != "celery" and not program.endswith("celery/__main__.py"):
        return None
    commands = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    for name in ("worker", "beat", "inspect", "control", "call", "purge", "shell", "events"):
        if name in commands:
            return name
    return "other"


def celery_setup(command: str) -> None:
    """What a Celery process does first: settings or one line; then wait for what it needs."""
    setup()
    if command in ("worker", "beat"):
        wait_for("database", database_answers)
    if command == "beat":  # a worker's consumer already retries the broker with backoff
        wait_for("broker", broker_answers)


def fail(message: str) -> None:
    """Print ``message`` as the one line explaining why Conveyor cannot start; exit 2."""
    sys.stderr.write(f"conveyor: cannot start: {message}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_BAD_SETTING)


def setup() -> None:
    """Load the settings and the apps (which validate theirs), or fail in one line."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    try:
        django.setup()
    except ImproperlyConfigured as exc:
        fail(str(exc))
    report_unknown_variables()
    report_tightened_modes()


@contextmanager
def database_reachable():
    """Turn a failure to connect to the database into one line and exit status 2.

    Only a failed connection: an error of a statement on a live connection (a deadlock in a
    migration, say) is the command's own and keeps its traceback.
    """
    from django.db import OperationalError, connection

    try:
        yield
    except OperationalError as exc:
        if connection.connection is not None:
            raise
        reason = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        fail(f"DATABASE_URL: cannot connect to the database: {redact_text(reason or repr(exc))}")


def report_tightened_modes() -> list[str]:
    """Log one warning naming the files of var/ whose modes start-up made private."""
    from project import secretfiles

    tightened = secretfiles.tightened_paths()
    if tightened:
        logger.warning(
            "startup.permissions_tightened",
            extra={"paths": tightened, "hint": "others could read them: secrets may have leaked"},
        )
    return tightened


def report_unknown_variables() -> list[str]:
    """Log one warning naming the ``CONVEYOR_*`` variables that no setting reads."""
    from project.settings_registry import unknown_variables

    unknown = unknown_variables(dict(os.environ))
    if unknown:
        logger.warning(
            "settings.unknown_variables",
            extra={"names": unknown, "hint": "not read by any setting: a typo or a leftover?"},
        )
    return unknown


def wait_for(what: str, check: Callable[[], object]) -> None:
    """Call ``check`` until it stops raising, logging each failure and backing off."""
    delay, attempt = 1.0, 1
    while True:
        try:
            check()
            if attempt > 1:
                logger.info("startup.reachable", extra={"service": what, "attempts": attempt})
            return
        # Broad on purpose: a driver that cannot connect raises its own types (psycopg's,
        # redis-py's, amqp's, socket errors), and every one of them means "not yet"; each try
        # is logged with its error, and the process keeps waiting rather than dying.
        except Exception as exc:
            logger.warning(
                "startup.unreachable",
                extra={
                    "service": what,
                    "error": f"{exc.__class__.__name__}: {exc}"[:300],
                    "attempt": attempt,
                    "retry_in_seconds": delay,
                },
            )
        time.sleep(delay)
        delay, attempt = min(delay * 2, MAX_BACKOFF_SECONDS), attempt + 1


def database_answers() -> None:
    from django.db import connection

    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # re-raised: only drops the broken connection before the next try
        connection.close_if_unusable_or_obsolete()
        connection.close()
        raise


def broker_answers() -> None:
    from project.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=0, timeout=3)
