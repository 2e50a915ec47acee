"""Freeze windows: when an environment refuses new deployments.

A window is one of two shapes, each in its own time zone (IANA name, default ``UTC``)::

    {name: weekend, cron: "0 18 * * fri", duration: 62h, timezone: Europe/Paris}
    {name: year-end, start: "2026-12-20 00:00", end: "2027-01-04 00:00", timezone: UTC}

A cron window opens at every minute its five fields (minute hour day-of-month month
day-of-week, as ``celery.schedules.crontab`` reads them: a day matches when its day of month,
month and day of week all match) name in local time, and stays open for ``duration``. A dated
window is open from ``start`` (included) to ``end`` (excluded), both local times.

Stored windows are the normalised dicts ``parse_window`` returns; ``active_window`` says
which one, if any, is open at a moment.
"""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import ParseException, crontab

from project.env import parse_duration

MAX_CRON_DURATION = timedelta(days=31)
WINDOW_KEYS = {"name", "cron", "duration", "start", "end", "timezone"}


@dataclass(frozen=True)
class OpenWindow:
    """A freeze window open now: its name and the bounds of this opening (UTC)."""

    name: str
    opened_at: datetime
    closes_at: datetime

    def describe(self) -> str:
        return (
            f"freeze window {self.name!r} "
            f"({self.opened_at.isoformat()} to {self.closes_at.isoformat()})"
        )


def parse_window(raw: object, where: str, errors: list[str]) -> dict | None:
    """Validate one window; return its normalised dict, or None after noting the errors."""
    if not isinstance(raw, dict):
        errors.append(f"{where}: must be a mapping with name and cron+duration or start+end")
        return None
    for key in raw:
        if key not in WINDOW_KEYS:
            errors.append(f"{where}.{key}: unknown key (allowed: {', '.join(sorted(WINDOW_KEYS))})")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        errors.append(f"{where}.name: required, at most 100 characters")
        return None
    zone = raw.get("timezone", "UTC")
    try:
        tz = ZoneInfo(str(zone))
    except (ZoneInfoNotFoundError, ValueError):
        errors.append(f"{where}.timezone: {zone!r} is not a known time zone")
        return None
    window = {"name": name.strip(), "timezone": str(zone)}
    if "cron" in raw:
        if "start" in raw or "end" in raw:
            errors.append(f"{where}: give cron+duration or start+end, not both")
            return None
        return _cron_window(raw, window, where, errors)
    if "start" in raw and "end" in raw:
        return _dated_window(raw, window, tz, where, errors)
    errors.append(f"{where}: needs cron and duration, or start and end")
    return None


def _cron_window(raw: dict, window: dict, where: str, errors: list[str]) -> dict | None:
    expression = raw.get("cron")
    try:
        _crontab(expression)
    except (ParseException, ValueError, TypeError) as exc:
        errors.append(f"{where}.cron: not a 5-field cron expression ({exc})")
        return None
    try:
        duration = parse_duration(str(raw.get("duration", "")))
    except ValueError:
        errors.append(f"{where}.duration: required with cron; seconds or like 30m, 2h, 3d")
        return None
    if not timedelta(minutes=1) <= duration <= MAX_CRON_DURATION:
        errors.append(f"{where}.duration: must be between 1m and 31d")
        return None
    return {**window, "cron": expression, "duration": int(duration.total_seconds())}


def _dated_window(raw: dict, window: dict, tz, where: str, errors: list[str]) -> dict | None:
    bounds = {}
    for key in ("start", "end"):
        value = raw[key]
        if isinstance(value, date) and not isinstance(value, datetime):
            value = datetime.combine(value, datetime.min.time())  # a YAML date
        try:
            moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        except ValueError:
            errors.append(f"{where}.{key}: not a date-time like 2026-12-20 00:00")
            return None
        bounds[key] = moment.replace(tzinfo=None)  # local to the window's time zone
    if bounds["end"] <= bounds["start"]:
        errors.append(f"{where}.end: must be after start")
        return None
    return {**window, **{key: moment.isoformat() for key, moment in bounds.items()}}


def _crontab(expression: object) -> crontab:
    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise ValueError("five fields: minute hour day-of-month month day-of-week")
    minute, hour, day_of_month, month, day_of_week = expression.split()
    return crontab(
        minute=minute,
        hour=hour,
        day_of_month=day_of_month,
        month_of_year=month,
        day_of_week=day_of_week,
    )


def active_window(windows: list[dict], now: datetime | None = None) -> OpenWindow | None:
    """Return the window open at ``now`` that closes last, or None if none is open."""
    now = now or datetime.now(UTC)
    found = [opening for window in windows or [] if (opening := window_open_at(window, now))]
    return max(found, key=lambda opening: opening.closes_at, default=None)


def window_open_at(window: dict, now: datetime) -> OpenWindow | None:
    """Return the opening of ``window`` that contains ``now``, or None."""
    tz = ZoneInfo(window.get("timezone") or "UTC")
    if "cron" in window:
        duration = timedelta(seconds=window["duration"])
        opened = _last_fire(_crontab(window["cron"]), now.astimezone(tz), duration)
        if opened is None:
            return None
        closes = opened + duration
        return OpenWindow(window["name"], opened.astimezone(UTC), closes.astimezone(UTC))
    start = datetime.fromisoformat(window["start"]).replace(tzinfo=tz)
    end = datetime.fromisoformat(window["end"]).replace(tzinfo=tz)
    if start <= now < end:
        return OpenWindow(window["name"], start.astimezone(UTC), end.astimezone(UTC))
    return None


def _last_fire(schedule: crontab, local_now: datetime, duration: timedelta) -> datetime | None:
    """Return the latest fire time in (now - duration, now], in local time; None if none."""
    earliest = local_now - duration
    tz = local_now.tzinfo
    day = local_now.date()
    while day >= earliest.date():
        cron_weekday = (day.weekday() + 1) % 7  # cron counts from Sunday = 0
        if (
            day.month in schedule.month_of_year
            and day.day in schedule.day_of_month
            and cron_weekday in schedule.day_of_week
        ):
            for hour in sorted(schedule.hour, reverse=True):
                for minute in sorted(schedule.minute, reverse=True):
                    fire = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
                    if fire <= local_now:
                        return fire if fire > earliest else None
        day -= timedelta(days=1)
    return None
