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


def get() -> JobSettings:
    """Return the settings in force (read each call so tests can override them)."""
    return JobSettings(
        lease_timeout=settings.CONVEYOR_JOB_LEASE_TIMEOUT,
        max_attempts=settings.CONVEYOR_JOB_MAX_ATTEMPTS,
        retry_backoff_max=settings.CELERY_TASK_RETRY_BACKOFF_MAX,
        sweeper_grace=settings.CONVEYOR_SWEEPER_GRACE,
        completed_retention=settings.CONVEYOR_PURGE_COMPLETED_RETENTION,
        dead_retention=settings.CONVEYOR_PURGE_DEAD_RETENTION,
    )


def validate() -> None:
    """Fail loudly at start-up on settings that cannot work together."""
    conf = get()
    if conf.lease_timeout < timedelta(seconds=5):
        raise ImproperlyConfigured("CONVEYOR_JOB_LEASE_TIMEOUT must be at least 5s")
    if conf.sweeper_grace < timedelta(seconds=1):
        raise ImproperlyConfigured("CONVEYOR_SWEEPER_GRACE must be at least 1s")
