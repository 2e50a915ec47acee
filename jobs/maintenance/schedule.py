"""Install the maintenance schedule (``CONVEYOR_PERIODIC_TASKS``) into django-celery-beat.

``manage.py setup_periodic_tasks`` calls ``schedule_install()`` on every ``make run`` and
deploy, and prints what it did to each entry: ``added``, ``changed`` (with what), ``unchanged``
or ``removed``. The rules, also in docs/operations.md:

* a schedule that does not exist is added, enabled, with the interval of its
  ``CONVEYOR_*_INTERVAL`` setting;
* **enabled/disabled belongs to the operator**: a schedule disabled in the admin stays
  disabled (the result says so); re-enable it in the admin;
* **the interval belongs to the settings**: an interval edited in the admin is put back to the
  setting's value (the result says from what). So are the task, the queue and the expiry;
* an entry this command installed once (named ``conveyor: …``, running a ``maintenance.``
  task) that the settings no longer list is removed: a renamed entry would otherwise run its
  task twice. Entries an operator added under other names are left alone.

An entry already as the settings want it is not saved again: a save would make every beat
process reload its whole schedule.
"""

from dataclasses import dataclass
from enum import StrEnum

from django.conf import settings
from django.db import transaction

from jobs.maintenance.runs import _PERIOD_SECONDS, TASK_PREFIX

NAME_PREFIX = "conveyor: "  # every entry of CONVEYOR_PERIODIC_TASKS is named so
QUEUE = "maintenance"


class Action(StrEnum):
    ADDED = "added"
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    REMOVED = "removed"


@dataclass(frozen=True)
class EntryResult:
    """What ``schedule_install`` did to one beat entry."""

    action: Action
    name: str
    task: str
    seconds: int | None  # the entry's interval (None for a removed entry)
    changes: tuple[str, ...] = ()  # what a change changed, e.g. "interval reset from 5s ..."
    kept_disabled: bool = False

    def describe(self) -> str:
        if self.action is Action.REMOVED:
            return f"removed: {self.name} -> {self.task} (no longer in the settings)"
        line = f"{self.action}: {self.name} every {self.seconds}s -> {self.task}"
        if self.changes:
            line += f" ({'; '.join(self.changes)})"
        if self.kept_disabled:
            line += " [kept disabled: it was disabled in the admin]"
        return line


@transaction.atomic
def schedule_install() -> list[EntryResult]:
    """Make beat's maintenance entries what the settings say; return one result per entry."""
    from django_celery_beat.models import PeriodicTask

    results = []
    wanted = []
    for name, task, interval in settings.CONVEYOR_PERIODIC_TASKS:
        seconds = max(1, int(interval.total_seconds()))
        results.append(_install(name=name, task=task, seconds=seconds))
        wanted.append(name)
    stale = (
        PeriodicTask.objects.select_for_update()
        .filter(name__startswith=NAME_PREFIX, task__startswith=TASK_PREFIX)
        .exclude(name__in=wanted)
        .order_by("name")
    )
    for entry in stale:
        # One by one: django-celery-beat's delete signal tells beat its schedule changed.
        entry.delete()
        results.append(EntryResult(Action.REMOVED, entry.name, entry.task, None))
    return results


def _install(*, name: str, task: str, seconds: int) -> EntryResult:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    schedule, _ = IntervalSchedule.objects.get_or_create(
        every=seconds, period=IntervalSchedule.SECONDS
    )
    wanted = {
        "task": task,
        "interval": schedule,
        "crontab": None,
        "queue": QUEUE,
        # A tick that waited longer than one interval is stale: the next one comes.
        "expire_seconds": seconds,
    }
    entry, created = PeriodicTask.objects.get_or_create(
        name=name, defaults={**wanted, "enabled": True}
    )
    if created:
        return EntryResult(Action.ADDED, name, task, seconds)
    entry = (
        PeriodicTask.objects.select_for_update(of=("self",))
        .select_related("interval")
        .get(pk=entry.pk)
    )
    changes = _differences(entry, task=task, seconds=seconds)
    if changes:
        for field, value in wanted.items():
            setattr(entry, field, value)
        entry.save()
    action = Action.CHANGED if changes else Action.UNCHANGED
    return EntryResult(action, name, task, seconds, tuple(changes), not entry.enabled)


def _differences(entry, *, task: str, seconds: int) -> list[str]:
    """How ``entry`` differs from what the settings want, one phrase per difference."""
    changes = []
    if entry.task != task:
        changes.append(f"task was {entry.task}")
    if entry.interval is None:
        changes.append("schedule reset from a non-interval schedule to the setting")
    else:
        current = entry.interval.every * _PERIOD_SECONDS.get(entry.interval.period, 1)
        if current != seconds:
            changes.append(f"interval reset from {current:g}s to the setting")
    if entry.crontab_id is not None and entry.interval is not None:
        changes.append("crontab removed")
    if entry.queue != QUEUE:
        changes.append(f"queue was {entry.queue or 'unset'}")
    if entry.expire_seconds != seconds:
        was = "unset" if entry.expire_seconds is None else f"{entry.expire_seconds}s"
        changes.append(f"expiry was {was}")
    return changes
