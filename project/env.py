"""Read typed settings from the environment, failing loudly on a bad value.

Durations accept plain seconds or a number with one unit: ``30s``, ``5m``, ``24h``, ``7d``.
"""

import ipaddress
import os
import re
from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_SECONDS = 10 * 365 * 86400
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_duration(value: str) -> timedelta:
    """Parse ``"90"``, ``"30s"``, ``"5m"``, ``"24h"`` or ``"7d"`` into a timedelta."""
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a duration (use seconds or 30s, 5m, 24h, 7d)")
    number, unit = match.groups()
    seconds = float(number) * _UNIT_SECONDS[unit]
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{value!r} is longer than the 10-year maximum")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """Write ``value`` the way settings are written: ``90s``, ``5m``, ``24h``, ``7d``."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def at_least(name: str, value: timedelta, minimum: timedelta) -> None:
    """Refuse duration setting ``name`` when ``value`` is shorter than ``minimum``."""
    if value < minimum:
        raise ImproperlyConfigured(
            f"{name}: {format_duration(value)!r} is too short (expected at least "
            f"{format_duration(minimum)})"
        )


def duration(name: str, default: str) -> timedelta:
    """Return the duration in environment variable ``name``, else ``default``."""
    raw = os.environ.get(name, default)
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def boolean(name: str, default: bool) -> bool:
    """Return the boolean in environment variable ``name``, else ``default``."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse_boolean(raw)
    except ValueError:
        raise ImproperlyConfigured(
            f"{name}: {raw!r} is not a boolean (use true or false)"
        ) from None


def parse_boolean(value: str) -> bool:
    """Parse ``true``/``false`` (or 1/0, yes/no, on/off, any case)."""
    lowered = str(value).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{value!r} is not a boolean")


def integer(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    """Return the integer in environment variable ``name``, else ``default``."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}: {value} is below the minimum of {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}: {value} is above the maximum of {maximum}")
    return value


def counts_by_name(name: str) -> dict[str, int]:
    """Return ``{key: N}`` from environment variable ``name`` as ``key=N,key=N`` (N ≥ 1)."""
    raw = os.environ.get(name, "")
    found: dict[str, int] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        key, sep, number = (part.strip() for part in entry.partition("="))
        if not sep or not key or not number.isdigit() or int(number) < 1:
            raise ImproperlyConfigured(f"{name}: {entry!r} is not name=N with N at least 1")
        if key in found:
            raise ImproperlyConfigured(f"{name}: {key!r} is given twice")
        found[key] = int(number)
    return found


def networks(name: str, default: str = "") -> str:
    """Return environment variable ``name``, a comma-separated list of IP addresses or
    networks (``10.0.0.0/8``), once each entry parses."""
    raw = os.environ.get(name, default)
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not an IP address or network (such as 10.0.0.0/8)"
            ) from None
    return raw


def string(name: str, default: str = "") -> str:
    """Return environment variable ``name``, else ``default``."""
    return os.environ.get(name, default)


def choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Return environment variable ``name`` (case-insensitive) if it is one of ``choices``."""
    raw = os.environ.get(name, default).strip().upper()
    if raw not in choices:
        raise ImproperlyConfigured(f"{name}: {raw!r} is not one of {', '.join(choices)}")
    return raw


def inherited(names) -> dict[str, str]:
    """This process's variables among ``names``, for a child it starts (git, a step)."""
    return {name: os.environ[name] for name in names if name in os.environ}


def variable(name: str) -> str | None:
    """Variable ``name`` of this process, or None: a value a projects file names by
    ``from_env``, read when the file is applied (never a ``CONVEYOR_*`` setting)."""
    return os.environ.get(name)
