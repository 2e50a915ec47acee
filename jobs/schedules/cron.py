"""When a schedule's slots fall: cron expressions in a time zone, or a fixed interval.

A slot is an instant (UTC). A **cron** schedule's slots are wall-clock times in its zone
(``zoneinfo``), turned into instants by one rule at the daylight-saving changes:

* a wall time that does not exist (the hour the clocks skip in spring) runs once, at the
  next valid instant: the moment of the change (02:30 in Paris on the spring day runs at
  03:00 CEST). Several such times collapse into that one slot;
* a wall time that occurs twice (the hour repeated in autumn) runs once, at its first
  occurrence (``fold=0``, still summer time).

Cron fields are the five of crontab(5) (minute hour day-of-month month day-of-week, Sunday
= 0), parsed by Celery's ``crontab_parser``, plus ``@hourly``, ``@daily``, ``@weekly``,
``@monthly`` and ``@yearly``. As in Vixie cron, when both day-of-month and day-of-week are
restricted a day matching either runs. An **interval** schedule (``every``) has slots at the
multiples of its length since the Unix epoch, in UTC: zones and clock changes do not touch it.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from celery.schedules import crontab

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# How far a search for the next slot looks before deciding there is none (e.g. "0 0 30 2 *").
SEARCH_DAYS = 5 * 366


class BadCron(ValueError):
    """A cron expression that cannot be parsed; the message says which field and why."""


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression: the sets of values each field allows."""

    expression: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, expression: str) -> "Cron":
        """Parse a five-field expression or a macro; raise BadCron saying what is wrong."""
        text = MACROS.get(expression.strip().lower(), expression)
        fields = text.split()
        if len(fields) != 5:
            raise BadCron(f"cron {expression!r} has {len(fields)} fields, not 5")
        minute, hour, day, month, weekday = fields
        try:
            parsed = crontab(
                minute=minute,
                hour=hour,
                day_of_month=day,
                month_of_year=month,
                day_of_week=weekday,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise BadCron(f"cron {expression!r}: {exc}") from None
        return cls(
            expression=expression,
            minutes=tuple(sorted(parsed.minute)),
            hours=tuple(sorted(parsed.hour)),
            days=frozenset(parsed.day_of_month),
            months=frozenset(parsed.month_of_year),
            weekdays=frozenset(parsed.day_of_week),
            days_restricted=day != "*",
            weekdays_restricted=weekday != "*",
        )

    def runs_on(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        on_day = day.day in self.days
        on_weekday = day.isoweekday() % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return on_day or on_weekday
        return on_day and on_weekday

    def wall_times(self, day: date) -> Iterator[datetime]:
        """The day's wall-clock times (naive), in order."""
        if not self.runs_on(day):
            return
        for hour in self.hours:
            for minute in self.minutes:
                yield datetime.combine(day, time(hour, minute))


def instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of naive wall time ``wall`` in ``zone``, by the rule above."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if _wall(first, zone) == wall:
        return first  # exists; when repeated, this is its first occurrence
    # In the spring gap: fold=1 reads it with the later offset (an instant before the change),
    # fold=0 with the earlier one (an instant after it). The change lies between; find it.
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = first
    while high - low > timedelta(seconds=1):
        middle = low + timedelta(seconds=(high - low).total_seconds() // 2)
        if _wall(middle, zone) >= wall:
            high = middle
        else:
            low = middle
    return high


def _wall(moment: datetime, zone: ZoneInfo) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


def cron_slots(cron: Cron, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Every slot strictly after ``after`` (UTC), in order, without end."""
    day = _wall(after, zone).date() - timedelta(days=1)  # a gap can pull a slot back an hour
    last = after
    empty_days = 0
    while empty_days <= SEARCH_DAYS:
        found = False
        for wall in cron.wall_times(day):
            moment = instant(wall, zone)
            if moment > last:  # strictly later: gap times that collapse come once
                found = True
                last = moment
                yield moment
        empty_days = 0 if found else empty_days + 1
        day += timedelta(days=1)


def interval_slots(every: timedelta, after: datetime) -> Iterator[datetime]:
    """Every multiple of ``every`` since the epoch strictly after ``after``, without end."""
    count = (after - _EPOCH) // every + 1
    while True:
        yield _EPOCH + count * every
        count += 1
