"""Run one maintenance pass safely: one at a time, not too often, and recorded.

Every maintenance runner (reaper, sweeper, the purges, workspace fetch, worktree prune) goes
through ``run()``, called by its Celery task and by ``manage.py run_maintenance``. Two beat
processes are a common accident (a deploy that starts the new beat before the old one stops,
two hosts with the same compose file): each then sends every tick, and without this module
every pass would happen twice.

* **One at a time.** A run holds a database lock named after its runner: a PostgreSQL
  session advisory lock (``pg_try_advisory_lock``, released with the session if the worker
  dies), elsewhere (SQLite) a ``MaintenanceLock`` row held until released or for
  ``LOCK_TTL_MIN`` / one interval, whichever is longer. A concurrent run does not wait.
* **Not too often.** A run that starts less than half an interval after the same runner's last
  completed run is skipped. The interval is the beat schedule's (an operator may have edited
  it in the admin), else the ``CONVEYOR_*_INTERVAL`` setting. ``force=True`` (an operator's
  ``run_maintenance``) skips only this check.
* **Recorded.** A completed run writes one ``MaintenanceRun`` row (runner, started, duration,
  the counts the service returned, its error) and logs one ``maintenance.run`` line with the
  same fields; a skipped run logs one ``maintenance.skipped`` line with its ``reason``
  (both at DEBUG for the runners that tick every few seconds, ``TICKERS``, when they did
  nothing). Rows older than ``CONVEYOR_MAINTENANCE_RETENTION`` (7d) go, except each
  runner's latest; a runner keeps at most ``MAX_RECORDS_PER_RUNNER`` rows, so one that runs
  every few seconds (``account_jobs``) keeps about a day of them rather than a week.
* **Contained.** A service that raises is recorded with its error and logged with its
  traceback; ``run()`` returns normally, so no other runner and no later tick is affected.
"""

import enum
import logging
import os
import socket
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, InterfaceError, connection
from django.utils import timezone

from jobs import conf
from jobs.models import MaintenanceLock, MaintenanceRun
from project.batch_delete import delete_in_batches

logger = logging.getLogger("jobs.maintenance")

# The first key of every Conveyor advisory lock: keeps ours apart from other applications'.
ADVISORY_NAMESPACE = 0x434F4E56  # "CONV"
# On databases without advisory locks, a lock row left by a killed worker frees itself after
# this long (or one interval, if longer).
LOCK_TTL_MIN = timedelta(minutes=5)
TASK_PREFIX = "maintenance."
# Over two weeks of a once-a-minute runner (so the retention decides for those), about a day of
# the five-second accounting runner's.
MAX_RECORDS_PER_RUNNER = 20_000
# Runners that tick every few seconds all day (the schedule tick every second, the accounting
# every five), with the counts that say a run did something. A run of theirs that did
# nothing, and a skip of theirs, is logged at DEBUG (and recorded all the same), so that a
# quiet day is not 100,000 lines.
TICKERS = {
    "fire_schedules": ("schedules", "fired", "missed", "dropped", "failed"),
    "account_jobs": ("folded", "tallies_folded"),
}


class SkipReason(enum.StrEnum):
    """Why ``run()`` did not run a runner this time (logged as ``maintenance.skipped``'s reason)."""

    LOCKED = "another run of this runner holds its lock"
    RECENT = "the last completed run was less than half an interval ago"


@dataclass(frozen=True)
class RunOutcome:
    runner: str
    ran: bool
    counts: dict = field(default_factory=dict)
    error: str = ""
    skipped: SkipReason | None = None  # None: it ran
    duration_ms: int = 0


def host() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def configured_intervals() -> dict[str, timedelta]:
    """Return each runner's interval from the settings (``CONVEYOR_PERIODIC_TASKS``)."""
    return {
        task.removeprefix(TASK_PREFIX): interval
        for _, task, interval in settings.CONVEYOR_PERIODIC_TASKS
    }


def scheduled_intervals() -> dict[str, tuple[timedelta, bool]]:
    """Return ``{runner: (interval, enabled)}`` as the beat schedule holds it now."""
    from django_celery_beat.models import PeriodicTask

    found = {}
    tasks = PeriodicTask.objects.filter(task__startswith=TASK_PREFIX, interval__isnull=False)
    for task in tasks.select_related("interval"):
        seconds = task.interval.every * _PERIOD_SECONDS.get(task.interval.period, 1)
        found[task.task.removeprefix(TASK_PREFIX)] = (timedelta(seconds=seconds), task.enabled)
    return found


_PERIOD_SECONDS = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1, "microseconds": 1e-6}


def interval_of(runner: str) -> timedelta:
    """Return ``runner``'s interval: the beat schedule's, else its setting, else one hour."""
    scheduled = scheduled_intervals().get(runner)
    if scheduled is not None:
        return scheduled[0]
    return configured_intervals().get(runner, timedelta(hours=1))


def run_task(runner: str, service: Callable[[], object], *, force: bool = False) -> dict:
    """What a maintenance task returns: ``run()``'s outcome as a dict."""
    return asdict(run(runner, service, force=force))


def run(runner: str, service: Callable[[], object], *, force: bool = False) -> RunOutcome:
    """Run ``service`` as maintenance runner ``runner`` unless a twin holds it or it just ran."""
    interval = interval_of(runner)
    lock = _Lock(runner, ttl=max(interval, LOCK_TTL_MIN))
    if not lock.acquire():
        return _skipped(runner, SkipReason.LOCKED, interval)
    try:
        if not force:
            last = _last_finished_at(runner)
            if last is not None and timezone.now() - last < interval / 2:
                return _skipped(runner, SkipReason.RECENT, interval, last_finished_at=last)
        return _run_and_record(runner, service)
    finally:
        lock.release()


def _run_and_record(runner: str, service: Callable[[], object]) -> RunOutcome:
    started_at = timezone.now()
    clock = time.monotonic()
    counts, error = {}, ""
    try:
        counts = _counts(service())
    except Exception as exc:  # recorded and logged below; never reaches another runner
        error = f"{exc.__class__.__name__}: {exc}"
        logger.exception("maintenance.failed", extra={"runner": runner, "error": error})
    duration_ms = int((time.monotonic() - clock) * 1000)
    record = MaintenanceRun.objects.create(
        runner=runner,
        started_at=started_at,
        finished_at=timezone.now(),
        duration_ms=duration_ms,
        counts=counts,
        error=error,
        host=host(),
    )
    idle = runner in TICKERS and not error and not any(counts.get(n) for n in TICKERS[runner])
    logger.log(
        logging.DEBUG if idle else logging.INFO,
        "maintenance.run",
        extra={
            "runner": runner,
            "started_at": started_at.isoformat(),
            "duration_ms": duration_ms,
            "counts": counts,
            "error": error or None,
        },
    )
    _purge_records(runner, keep=record.pk)
    return RunOutcome(runner=runner, ran=True, counts=counts, error=error, duration_ms=duration_ms)


def _counts(result: object) -> dict:
    if is_dataclass(result) and not isinstance(result, type):
        return asdict(result)
    if isinstance(result, dict):
        return result
    return {} if result is None else {"result": result}


def _skipped(runner: str, reason: SkipReason, interval: timedelta, **extra) -> RunOutcome:
    logger.log(
        logging.DEBUG if runner in TICKERS else logging.INFO,
        "maintenance.skipped",
        extra={
            "runner": runner,
            "reason": reason,
            "interval_seconds": interval.total_seconds(),
            **{k: v.isoformat() if isinstance(v, datetime) else v for k, v in extra.items()},
        },
    )
    return RunOutcome(runner=runner, ran=False, skipped=reason)


def _last_finished_at(runner: str) -> datetime | None:
    return (
        MaintenanceRun.objects.filter(runner=runner)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )


def _purge_records(runner: str, *, keep: int) -> None:
    """Delete ``runner``'s records past the retention, or past the newest ``MAX_RECORDS``."""
    cutoff = timezone.now() - conf.get().maintenance_retention
    records = MaintenanceRun.objects.filter(runner=runner)
    # One step along the (runner, finished_at) index: the oldest record the cap still keeps.
    oldest_kept = list(
        records.order_by("-finished_at").values_list("finished_at", flat=True)[
            MAX_RECORDS_PER_RUNNER - 1 : MAX_RECORDS_PER_RUNNER
        ]
    )
    if oldest_kept:
        cutoff = max(cutoff, oldest_kept[0])
    delete_in_batches(
        records.filter(finished_at__lt=cutoff).exclude(pk=keep), order_by="finished_at"
    )


class _Lock:
    """A database lock named after a runner: advisory on PostgreSQL, a row elsewhere."""

    def __init__(self, runner: str, *, ttl: timedelta) -> None:
        self.runner = runner
        self.ttl = ttl
        self.key = zlib.crc32(runner.encode()) - 2**31  # fits PostgreSQL's int4
        self.holder = f"{host()}/{uuid.uuid4().hex[:8]}"
        self.advisory = connection.vendor == "postgresql"

    def acquire(self) -> bool:
        if self.advisory:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", [ADVISORY_NAMESPACE, self.key]
                )
                return bool(cursor.fetchone()[0])
        now = timezone.now()
        MaintenanceLock.objects.get_or_create(runner=self.runner, defaults={"expires_at": now})
        taken = MaintenanceLock.objects.filter(runner=self.runner, expires_at__lte=now).update(
            holder=self.holder, expires_at=now + self.ttl
        )
        return taken == 1

    def release(self) -> None:
        try:
            if self.advisory:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_advisory_unlock(%s, %s)", [ADVISORY_NAMESPACE, self.key]
                    )
                return
            MaintenanceLock.objects.filter(runner=self.runner, holder=self.holder).update(
                holder="", expires_at=timezone.now()
            )
        except (
            DatabaseError,
            InterfaceError,
        ) as exc:  # a lost connection took the advisory lock with it
            logger.warning(
                "maintenance.unlock_failed", extra={"runner": self.runner, "error": repr(exc)}
            )
