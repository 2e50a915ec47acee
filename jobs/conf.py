"""The job engine's settings, typed; validated at start-up.

Each is declared once, with its default and purpose, in project/settings_registry.py (listed
in docs/configuration.md, Job engine); ``get`` reads them once, and again after a change of
settings (a worker asks for them on every job).
"""

from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from project.env import at_least, format_duration


@dataclass(frozen=True)
class JobSettings:
    lease_timeout: timedelta
    max_attempts: int
    retry_backoff_max: int
    sweeper_grace: timedelta
    completed_retention: timedelta
    dead_retention: timedelta
    batch_size: int
    log_success: bool
    maintenance_retention: timedelta
    shutdown_grace: timedelta
    queue_concurrency: dict[str, int]
    workflow_max_nodes: int
    prepared_statements: bool


# Further in the future than this, a job is not published at enqueue: a countdown is held
# unacknowledged in a worker's memory, so the sweeper publishes it when it comes due.
SCHEDULE_HORIZON_SECONDS = 1800

# Shorter would purge a daily runner's history before an operator could look at it.
MIN_MAINTENANCE_RETENTION = timedelta(days=1)


@cache
def get() -> JobSettings:
    """Return the settings in force; read once (a worker asks for them on every job)."""
    return JobSettings(
        lease_timeout=settings.CONVEYOR_JOB_LEASE_TIMEOUT,
        max_attempts=settings.CONVEYOR_JOB_MAX_ATTEMPTS,
        retry_backoff_max=int(settings.CONVEYOR_RETRY_BACKOFF_MAX.total_seconds()),
        sweeper_grace=settings.CONVEYOR_SWEEPER_GRACE,
        completed_retention=settings.CONVEYOR_PURGE_COMPLETED_RETENTION,
        dead_retention=settings.CONVEYOR_PURGE_DEAD_RETENTION,
        batch_size=settings.CONVEYOR_BATCH_SIZE,
        log_success=settings.CONVEYOR_JOB_LOG_SUCCESS,
        maintenance_retention=settings.CONVEYOR_MAINTENANCE_RETENTION,
        shutdown_grace=settings.CONVEYOR_SHUTDOWN_GRACE,
        queue_concurrency=dict(settings.CONVEYOR_QUEUE_CONCURRENCY),
        workflow_max_nodes=settings.CONVEYOR_WORKFLOW_MAX_NODES,
        prepared_statements=settings.CONVEYOR_PREPARED_STATEMENTS,
    )


@receiver(setting_changed)
def _forget(**kwargs) -> None:
    """Read them again after a change (override_settings in tests)."""
    get.cache_clear()


# Periods of at least a second.
PERIODS = (
    "CONVEYOR_WORKER_HEARTBEAT",
    "CONVEYOR_REAPER_INTERVAL",
    "CONVEYOR_SWEEPER_INTERVAL",
    "CONVEYOR_ACCOUNTING_INTERVAL",
    "CONVEYOR_PURGE_INTERVAL",
)


def validate() -> None:
    """Fail loudly at start-up on settings that cannot work together."""
    conf = get()
    at_least("CONVEYOR_JOB_LEASE_TIMEOUT", conf.lease_timeout, timedelta(seconds=5))
    at_least("CONVEYOR_SWEEPER_GRACE", conf.sweeper_grace, timedelta(seconds=1))
    for name in PERIODS:  # at 0 a loop would spin, writing as fast as it can
        at_least(name, getattr(settings, name), timedelta(seconds=1))
    at_least(
        "CONVEYOR_MAINTENANCE_RETENTION", conf.maintenance_retention, MIN_MAINTENANCE_RETENTION
    )
    # A retry's countdown is held unacknowledged by a worker: the broker must not redeliver
    # it meanwhile (kombu's own Redis transport would, for rediss:// and sentinel://), and
    # the sweeper must not publish it a second time as "coming due".
    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout")
    if visibility is not None and visibility < 4 * conf.retry_backoff_max:
        raise ImproperlyConfigured(
            "the broker's visibility_timeout must be 4x CONVEYOR_RETRY_BACKOFF_MAX"
        )
    from project.celery import is_declared

    for name in conf.queue_concurrency:
        if not is_declared(name):
            raise ImproperlyConfigured(
                f"CONVEYOR_QUEUE_CONCURRENCY: {name!r} is not a declared queue"
            )
    if conf.retry_backoff_max > SCHEDULE_HORIZON_SECONDS:
        raise ImproperlyConfigured(
            f"CONVEYOR_RETRY_BACKOFF_MAX must be at most {SCHEDULE_HORIZON_SECONDS}s"
        )
    # Beat's schedules entry must fire well within the grace, or every slot looks missed.
    tick, grace = settings.CONVEYOR_SCHEDULE_TICK, settings.CONVEYOR_SCHEDULE_GRACE
    at_least("CONVEYOR_SCHEDULE_TICK", tick, timedelta(seconds=1))
    if grace < 2 * tick:
        raise ImproperlyConfigured(
            f"CONVEYOR_SCHEDULE_TICK: {format_duration(tick)!r} is too long for "
            f"CONVEYOR_SCHEDULE_GRACE ({format_duration(grace)}): the grace must be at least "
            "twice the tick, or a slot is seen late enough to count as missed"
        )
