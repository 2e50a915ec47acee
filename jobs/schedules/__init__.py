"""Schedules from code: cron (in a time zone) or every N, exactly one job per slot.

Declare with ``ScheduleSpec`` (a task's ``schedules=`` option), ``declare()`` or the
``CONVEYOR_SCHEDULES`` setting; ``setup_periodic_tasks`` reconciles them into the database and
``maintenance.fire_schedules`` fires them. See docs/jobs.md, Schedules.
"""

from jobs.schedules.spec import Missed, ScheduleSpec, declare

__all__ = ("Missed", "ScheduleSpec", "declare")
