"""The schedules' settings, typed (declared in project/settings_registry.py)."""

from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver


@dataclass(frozen=True)
class ScheduleSettings:
    tick: timedelta
    grace: timedelta


@cache
def get() -> ScheduleSettings:
    return ScheduleSettings(
        tick=settings.CONVEYOR_SCHEDULE_TICK, grace=settings.CONVEYOR_SCHEDULE_GRACE
    )


@receiver(setting_changed)
def _forget(**kwargs) -> None:
    get.cache_clear()
