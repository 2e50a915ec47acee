"""The ``environments:`` list of a project in a projects document.

::

    environments:
      - name: production            # folded to lower case: Production is production
        protected: true             # deployments wait for approvals
        required_approvals: 2       # default 1 when protected; at most 10
        approvers:                  # who may approve (default: staff with approve_deployment)
          users: [alice, bob]
          groups: [release-managers]
        allow_self_approval: false
        refs: [main, "release/*"]   # refs that may deploy here (glob; * stops at /)
        wait_timer: 10m             # a deployment may not start earlier after its creation
        freeze:                     # see deployments.freeze
          - {name: weekend, cron: "0 18 * * fri", duration: 62h, timezone: Europe/Paris}
          - {name: year-end, start: "2026-12-20 00:00", end: "2027-01-04 00:00"}
        health:                     # the gate after each success: see deployments.health
          window: 10m               # watched after the finish, compared with 10m before
          max_failure_rate: 0.2     # of the project's job and webhook attempts
          min_events: 5
          check: ./healthcheck      # optional; exit 0 = healthy
          rollback: true            # roll back to the last healthy deployment on a breach

An environment the document leaves out keeps its rules, or loses them with ``prune``.
"""

from dataclasses import dataclass, field

from django.core.exceptions import ValidationError

from deployments.freeze import parse_window
from deployments.health_rules import clean_rules
from deployments.models.environments import (
    MAX_REF_PATTERNS,
    MAX_REQUIRED_APPROVALS,
    validate_ref_patterns,
)
from deployments.models.projects import canonical_environment
from deployments.validation import NAME, matches
from project.env import parse_duration

ENVIRONMENT_KEYS = {
    "name", "protected", "required_approvals", "approvers", "allow_self_approval",
    "wait_timer", "freeze", "refs", "health",
}  # fmt: skip

APPROVER_KEYS = {"users", "groups"}
MAX_WAIT_TIMER = 30 * 24 * 3600
MAX_WINDOWS = 50


@dataclass
class EnvironmentSpec:
    name: str
    fields: dict = field(default_factory=dict)


def parse_environments(raw: object, where: str, errors: list[str], seconds) -> list:
    """Validate an ``environments`` list; ``seconds`` parses a duration key (schema's)."""
    if not isinstance(raw, list):
        errors.append(f"{where}: must be a list of environments")
        return []
    specs, names = [], set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            errors.append(f"{where}[{index}]: must be a mapping")
            continue
        name = item.get("name")
        here = f"{where}[{name if isinstance(name, str) and name else index}]"
        for key in item:
            if key not in ENVIRONMENT_KEYS:
                allowed = ", ".join(sorted(ENVIRONMENT_KEYS))
                errors.append(f"{here}.{key}: unknown key (allowed: {allowed})")
        if not matches(NAME, name):
            errors.append(f"{here}.name: required; 1-64 letters, digits, '.', '_' or '-'")
            continue
        name = canonical_environment(name)
        if name in names:
            errors.append(f"{here}.name: {name!r} is declared twice")
        names.add(name)
        specs.append(EnvironmentSpec(name=name, fields=_fields(item, here, errors, seconds)))
    return specs


def _fields(item: dict, here: str, errors: list[str], seconds) -> dict:
    protected = item.get("protected", False)
    if not isinstance(protected, bool):
        errors.append(f"{here}.protected: must be true or false")
        protected = False
    required = item.get("required_approvals", 1 if protected else 0)
    if isinstance(required, bool) or not isinstance(required, int):
        errors.append(f"{here}.required_approvals: must be a whole number")
        required = 0
    elif protected and not 1 <= required <= MAX_REQUIRED_APPROVALS:
        errors.append(f"{here}.required_approvals: must be between 1 and {MAX_REQUIRED_APPROVALS}")
    elif not protected and "required_approvals" in item:
        errors.append(f"{here}.required_approvals: only with protected: true")
    self_approval = item.get("allow_self_approval", False)
    if not isinstance(self_approval, bool):
        errors.append(f"{here}.allow_self_approval: must be true or false")
        self_approval = False
    users, groups = _approvers(item.get("approvers"), f"{here}.approvers", errors)
    wait = seconds(item, "wait_timer", here, errors, minimum=0, maximum=MAX_WAIT_TIMER)
    return {
        "protected": protected,
        "required_approvals": required if protected else 0,
        "approver_users": users,
        "approver_groups": groups,
        "allow_self_approval": self_approval,
        "wait_timer": wait or 0,
        "freeze": _windows(item.get("freeze"), f"{here}.freeze", errors),
        "refs": _refs(item.get("refs"), f"{here}.refs", errors),
        "health": _health(item.get("health"), f"{here}.health", errors),
    }


def _health(raw: object, where: str, errors: list[str]) -> dict:
    rules, found = clean_rules(raw, seconds=_duration_seconds)
    errors.extend(
        f"{where}.{error}" if ":" in error.split()[0] else f"{where}: {error}" for error in found
    )
    return rules


def _duration_seconds(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("not a duration")
    return int(parse_duration(str(value)).total_seconds())


def _refs(raw: object, where: str, errors: list[str]) -> list[str]:
    if raw is None:
        return []
    try:
        validate_ref_patterns(raw)
    except ValidationError as exc:
        errors.append(f"{where}: must be {exc.messages[0]} (at most {MAX_REF_PATTERNS})")
        return []
    return list(raw)


def _approvers(raw: object, where: str, errors: list[str]) -> tuple[list[str], list[str]]:
    if raw is None:
        return [], []
    if not isinstance(raw, dict):
        errors.append(f"{where}: must be a mapping with users and/or groups")
        return [], []
    for key in raw:
        if key not in APPROVER_KEYS:
            errors.append(f"{where}.{key}: unknown key (allowed: groups, users)")
    found = []
    for key in ("users", "groups"):
        names = raw.get(key, [])
        if not isinstance(names, list) or not all(
            isinstance(n, str) and 0 < len(n) <= 150 for n in names
        ):
            errors.append(f"{where}.{key}: must be a list of names")
            names = []
        found.append(sorted(set(names)))
    return found[0], found[1]


def _windows(raw: object, where: str, errors: list[str]) -> list[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_WINDOWS:
        errors.append(f"{where}: must be a list of at most {MAX_WINDOWS} windows")
        return []
    windows = [parse_window(item, f"{where}[{index}]", errors) for index, item in enumerate(raw)]
    return [window for window in windows if window is not None]
