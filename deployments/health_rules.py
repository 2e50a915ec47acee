"""The health gate's rules, as projects-as-code, the admin and the gate read them.

No model imports: the Environment model validates its ``health`` field with these.
"""

import logging

from django.core.exceptions import ValidationError

logger = logging.getLogger("deployments")

MAX_WINDOW = 24 * 3600
MAX_CHECK_TIMEOUT = 600
MAX_CHECK_LENGTH = 2000
RULE_KEYS = {
    "window", "max_failure_rate", "min_events", "check", "check_timeout", "rollback", "interval",
}  # fmt: skip
# Interim checks a window may have at most (``interval``); the last one is the window's end.
MAX_INTERIM_CHECKS = 20


def clean_rules(raw: object, *, seconds) -> tuple[dict, list[str]]:
    """Return stored rules from a ``health`` mapping and the errors found (keys relative).

    ``seconds(value)`` turns a duration (``10m`` or a number) into seconds or raises
    ValueError. An empty mapping (or None) means no gate.
    """
    if raw is None or raw == {}:
        return {}, []
    if not isinstance(raw, dict):
        return {}, ["must be a mapping with window, max_failure_rate, min_events, ..."]
    errors = [
        f"{key}: unknown key (allowed: {', '.join(sorted(RULE_KEYS))})"
        for key in raw
        if key not in RULE_KEYS
    ]
    rules: dict = {}
    for key, default, top in (
        ("window", None, MAX_WINDOW),
        ("check_timeout", 30, MAX_CHECK_TIMEOUT),
    ):
        try:
            value = seconds(raw[key]) if key in raw else default
        except (TypeError, ValueError):
            value = None
        if value is None or not 1 <= value <= top:
            needed = "required; " if key == "window" else ""
            errors.append(f"{key}: {needed}a duration from 1s to {top}s such as 10m")
        rules[key] = value
    interval = None
    if raw.get("interval") is not None:
        try:
            interval = seconds(raw["interval"])
        except (TypeError, ValueError):
            interval = 0
        window = rules["window"] or 0
        if not 1 <= interval < window or window / interval > MAX_INTERIM_CHECKS + 1:
            errors.append(
                f"interval: a duration shorter than the window, at most "
                f"{MAX_INTERIM_CHECKS} checks in it"
            )
    rules["interval"] = interval
    rate = raw.get("max_failure_rate", 0.2)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < 1:
        errors.append("max_failure_rate: a number from 0 to below 1, such as 0.2")
    minimum = raw.get("min_events", 5)
    if isinstance(minimum, bool) or not isinstance(minimum, int) or not 1 <= minimum <= 10**6:
        errors.append("min_events: a whole number of at least 1")
    check = raw.get("check", "")
    if not isinstance(check, str) or len(check) > MAX_CHECK_LENGTH or "\x00" in check:
        errors.append(f"check: a shell command of at most {MAX_CHECK_LENGTH} characters")
    rollback = raw.get("rollback", False)
    if not isinstance(rollback, bool):
        errors.append("rollback: must be true or false")
    if errors:
        return {}, errors
    rules.update(max_failure_rate=float(rate), min_events=minimum, check=check, rollback=rollback)
    return rules, []


def _whole_seconds(value: object) -> int:
    """A stored duration: whole seconds (the admin's JSON and the stored rules)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("not whole seconds")
    return value


def validate_health(value: object) -> None:
    """Refuse stored rules the gate could not apply (the admin's JSON field)."""
    _, errors = clean_rules(value, seconds=_whole_seconds)
    if errors:
        raise ValidationError("; ".join(errors) + " (durations in whole seconds)")


def stored_rules(value: object) -> dict:
    """Return the gate's rules from a stored value; {} (no gate) for none or a broken one."""
    rules, errors = clean_rules(value, seconds=_whole_seconds)
    if errors:
        logger.warning("deployment.health_rules_invalid", extra={"errors": errors})
    return rules
