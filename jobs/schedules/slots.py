"""A stored schedule's slots: the next ones, and the plan for the slots that have come due."""

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

from jobs.schedules.cron import Cron, cron_slots, interval_slots
from jobs.schedules.spec import Missed

# Past this many days, a schedule's backlog is not searched slot by slot (a year of minutes).
MAX_BACKLOG = timedelta(days=366)


def slots_after(schedule, after: datetime):
    """The schedule's slots strictly after ``after`` (UTC), in order, without end."""
    if schedule.cron:
        return cron_slots(Cron.parse(schedule.cron), ZoneInfo(schedule.timezone), after)
    return interval_slots(timedelta(seconds=schedule.every_seconds), after)


def next_slots(schedule, after: datetime, count: int) -> list[datetime]:
    return list(islice(slots_after(schedule, after), count))


@dataclass
class Plan:
    """What a tick does with the due slots of one schedule."""

    fire: list[datetime] = field(default_factory=list)
    due: int = 0  # slots that had come due
    missed: int = 0  # of those, the ones later than the grace
    last_due: datetime | None = None
    next_slot: datetime | None = None
    policy: str = ""  # the policy applied, when some were missed

    @property
    def missed_any(self) -> bool:
        return self.missed > 0


def plan(schedule, now: datetime, grace: timedelta) -> Plan:
    """Decide which due slots (``next_slot`` … ``now``) fire, by the missed-run policy.

    A slot is missed when the first tick to see it comes more than ``grace`` after it (beat,
    the workers or the database were down). With none missed every due slot fires. Otherwise
    ``skip`` fires only the slots still within the grace, ``last`` fires the latest due slot
    once, and ``all`` fires every due slot, at most ``missed_cap`` (the latest ones).
    """
    result = Plan()
    start = max(schedule.next_slot, now - MAX_BACKLOG) - timedelta(microseconds=1)
    keep = max(schedule.missed_cap, 1)
    tail: deque[datetime] = deque(maxlen=keep)
    on_time: list[datetime] = []
    slots = slots_after(schedule, start)
    for slot in slots:
        if slot > now:
            result.next_slot = slot
            break
        result.due += 1
        result.last_due = slot
        tail.append(slot)
        if now - slot > grace:
            result.missed += 1
        else:
            on_time.append(slot)
    if not result.missed:
        result.fire = on_time
        return result
    result.policy = schedule.missed
    if schedule.missed == Missed.SKIP:
        result.fire = on_time
    elif schedule.missed == Missed.LAST:
        result.fire = [result.last_due]
    else:
        result.fire = list(tail)
    return result
