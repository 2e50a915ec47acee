"""Conveyor's job engine: durable Job rows, executed by Celery workers."""

from jobs.errors import Permanent, RetryAfter, Snooze

__all__ = ("Permanent", "RetryAfter", "Snooze")
