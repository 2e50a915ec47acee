"""The job engine's settings, typed, with their defaults; validated at start-up."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


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


def get() -> JobSettings:
    """Return the settings in force (read each call so tests can override them)."""
    return JobSettings(
        lease_timeout=settings.CONVEYOR_JOB_LEASE_TIMEOUT,
        max_attempts=settings.CONVEYOR_JOB_MAX_ATTEMPTS,
        retry_backoff_max=settings.CONVEYOR_RETRY_BACKOFF_MAX,
        sweeper_grace=settings.CONVEYOR_SWEEPER_GRACE,
        completed_retention=settings.CONVEYOR_PURGE_COMPLETED_RETENTION,
        dead_retention=settings.CONVEYOR_PURGE_DEAD_RETENTION,
        batch_size=settings.CONVEYOR_BATCH_SIZE,
        log_success=settings.CONVEYOR_JOB_LOG_SUCCESS,
    )


def validate() -> None:
    """Fail loudly at start-up on settings that cannot work together."""
    conf = get()
    if conf.lease_timeout < timedelta(seconds=5):
        raise ImproperlyConfigured("CONVEYOR_JOB_LEASE_TIMEOUT must be at least 5s")
    if conf.sweeper_grace < timedelta(seconds=1):
        raise ImproperlyConfigured("CONVEYOR_SWEEPER_GRACE must be at least 1s")
    # A retry's countdown is held unacknowledged by a worker: the broker must not redeliver
    # it meanwhile, and the sweeper must not publish it a second time as "coming due".
    from jobs.publish import SCHEDULE_HORIZON_SECONDS

    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout")
    if visibility is not None and visibility < 4 * conf.retry_backoff_max:
        raise ImproperlyConfigured(
            "the broker's visibility_timeout must be 4x CONVEYOR_RETRY_BACKOFF_MAX"
        )
    if conf.retry_backoff_max > SCHEDULE_HORIZON_SECONDS:
        raise ImproperlyConfigured(
            f"CONVEYOR_RETRY_BACKOFF_MAX must be at most {SCHEDULE_HORIZON_SECONDS}s"
        )
