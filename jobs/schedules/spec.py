"""Schedules as code declares them: one typed ``ScheduleSpec`` each, checked at start-up.

Three places declare schedules, and all end up as ``ScheduleSpec`` values:

* ``CONVEYOR_SCHEDULES``: a JSON list of ``{name, task, cron | every, timezone?, payload?,
  queue?, priority?, missed?, missed_cap?, enabled?}``;
* a Celery task's ``schedules`` option: ``@shared_task(base=JobTask, name=...,
  schedules=[ScheduleSpec(name="nightly", cron="0 3 * * *", timezone="Europe/Paris")])``
  (``task`` is then the task itself);
* ``jobs.schedules.declare(task, name=..., cron=...)`` at import time of an app's
  ``tasks.py``, for a Celery task name or a ``django.tasks`` task.

``declared()`` gathers them; a bad one raises ImproperlyConfigured naming the schedule (an
invalid cron expression or interval, an unknown time zone, an unknown task, a name given
twice, an unknown missed-run policy), which start-up turns into one line and exit status 2.
"""

import json
from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from jobs.schedules.cron import BadCron, Cron
from jobs.services.enqueue import validate_payload
from project import env
from project.celery import is_declared

SETTING = "CONVEYOR_SCHEDULES"
DEFAULT_MISSED_CAP = 10
MAX_MISSED_CAP = 1000
MAX_NAME = 100
MAX_QUEUE = 100  # a job's queue name
KEYS = frozenset(
    {"name", "task", "cron", "every", "timezone", "payload", "queue", "priority", "missed",
     "missed_cap", "enabled"}
)  # fmt: skip


class Missed(StrEnum):
    """What a schedule does with slots it missed (beat, workers or the database were down)."""

    SKIP = "skip"  # run none of them; wait for the next slot
    LAST = "last"  # run the latest one, once
    ALL = "all"  # run each of them, oldest first, at most missed_cap (the latest ones)


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule: what to run (task, payload, queue, priority) and when (cron or every)."""

    name: str
    task: object = None  # a Celery task name or object, or a django.tasks Task
    cron: str | None = None
    every: timedelta | str | None = None
    timezone: str = "UTC"
    payload: dict = field(default_factory=dict)
    queue: str | None = None
    priority: int = 0
    missed: str = Missed.LAST
    missed_cap: int = DEFAULT_MISSED_CAP
    enabled: bool = True
    source: str = "code"


_declared: list[ScheduleSpec] = []


def declare(task, *, name: str, **options) -> ScheduleSpec:
    """Declare a schedule of ``task`` in code (call at import time of an app's tasks.py)."""
    spec = ScheduleSpec(name=name, task=task, **options)
    _declared.append(spec)
    return spec


def declared() -> list["Resolved"]:
    """Every schedule the settings and the code declare, checked; raise naming a bad one."""
    from project.celery import app

    specs = list(from_setting(getattr(settings, SETTING, "") or ""))
    for task in list(app.tasks.values()):
        for spec in getattr(task, "schedules", None) or ():
            if not isinstance(spec, ScheduleSpec):
                raise ImproperlyConfigured(
                    f"task {task.name!r}: schedules must be jobs.schedules.ScheduleSpec values"
                )
            specs.append(replace(spec, task=spec.task or task.name, source=f"task {task.name}"))
    specs += _declared
    resolved, seen = [], {}
    for spec in specs:
        if spec.name in seen:
            where = seen[spec.name]
            if where == spec.source:
                raise ImproperlyConfigured(f"{where}: schedule {spec.name!r} is declared twice")
            raise ImproperlyConfigured(
                f"schedule {spec.name!r} is declared twice ({where} and {spec.source})"
            )
        seen[spec.name] = spec.source
        resolved.append(resolve(spec))
    return resolved


def from_setting(raw: str) -> list[ScheduleSpec]:
    """Parse ``CONVEYOR_SCHEDULES``; raise ImproperlyConfigured naming the bad entry."""
    if not raw.strip():
        return []
    try:
        entries = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{SETTING}: not JSON ({exc})") from None
    if not isinstance(entries, list):
        raise ImproperlyConfigured(
            f"{SETTING}: a JSON list of schedules, not {type(entries).__name__}"
        )
    specs = []
    for position, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ImproperlyConfigured(f"{SETTING}: entry {position} is not an object with a name")
        label = f"{SETTING}: schedule {entry['name']!r}"
        unknown = sorted(set(entry) - KEYS)
        if unknown:
            raise ImproperlyConfigured(f"{label}: unknown keys {unknown} (known: {sorted(KEYS)})")
        if "task" not in entry:
            raise ImproperlyConfigured(f"{label}: no task")
        specs.append(ScheduleSpec(**entry, source=SETTING))
    return specs


@dataclass(frozen=True)
class Resolved:
    """A checked schedule, in the form the database row keeps it."""

    name: str
    task: str  # a Celery task name, or a django.tasks task's module path
    django_task: bool
    cron: str
    every_seconds: int | None
    timezone: str
    payload: dict
    queue: str
    priority: int
    missed: str
    missed_cap: int
    enabled: bool


def resolve(spec: ScheduleSpec) -> Resolved:
    """Check ``spec`` and return its stored form; raise ImproperlyConfigured naming it."""
    label = (
        f"schedule {spec.name!r}"
        if spec.source == "code"
        else (f"{spec.source}: schedule {spec.name!r}")
    )

    def bad(message: str) -> ImproperlyConfigured:
        return ImproperlyConfigured(f"{label}: {message}")

    if not isinstance(spec.name, str) or not spec.name.strip() or len(spec.name) > MAX_NAME:
        raise bad(f"a name is 1 to {MAX_NAME} characters")
    if (spec.cron is None) == (spec.every is None):
        raise bad("give exactly one of cron and every")
    every_seconds = None
    if spec.cron is not None:
        if not isinstance(spec.cron, str):
            raise bad(f"cron is a string, not {spec.cron!r}")
        try:
            Cron.parse(spec.cron)
        except BadCron as exc:
            raise bad(f"invalid {exc}") from None
    else:
        every_seconds = _every_seconds(spec.every, bad)
    try:
        ZoneInfo(str(spec.timezone))
    except (ZoneInfoNotFoundError, ValueError):
        raise bad(f"unknown time zone {spec.timezone!r}") from None
    task, django_task = _task_name(spec.task, bad)
    if not isinstance(spec.payload, dict):
        raise bad(f"payload is a JSON object, not {spec.payload!r}")
    try:
        validate_payload(spec.payload)
    except ValueError as exc:
        raise bad(str(exc)) from None
    if "slot" in spec.payload:
        raise bad('payload cannot hold "slot": each job gets its slot time there')
    if (
        isinstance(spec.priority, bool)
        or not isinstance(spec.priority, int)
        or not (-100 <= spec.priority <= 100)
    ):
        raise bad(f"priority is an integer from -100 to 100, not {spec.priority!r}")
    if spec.missed not in Missed.__members__.values():
        raise bad(f"missed is one of {', '.join(Missed)}, not {spec.missed!r}")
    cap = spec.missed_cap
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_MISSED_CAP:
        raise bad(f"missed_cap is an integer from 1 to {MAX_MISSED_CAP}, not {cap!r}")
    if not isinstance(spec.enabled, bool):
        raise bad(f"enabled is true or false, not {spec.enabled!r}")
    if spec.queue is not None and not isinstance(spec.queue, str):
        raise bad(f"queue is a string, not {spec.queue!r}")
    if spec.queue is not None and len(spec.queue) > MAX_QUEUE:
        raise bad(f"a queue name is at most {MAX_QUEUE} characters")
    if spec.queue and not is_declared(spec.queue):  # no worker would ever take its jobs
        raise bad(
            f"queue {spec.queue!r} is not declared: use one of Conveyor's queues, or add it "
            "to TASKS[...]['QUEUES'] (docs/jobs.md)"
        )
    return Resolved(
        name=spec.name,
        task=task,
        django_task=django_task,
        cron=spec.cron or "",
        every_seconds=every_seconds,
        timezone=str(spec.timezone),
        payload=spec.payload,
        queue=spec.queue or "",
        priority=spec.priority,
        missed=str(spec.missed),
        missed_cap=cap,
        enabled=spec.enabled,
    )


def _every_seconds(every, bad) -> int:
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, int | str) and not isinstance(every, bool):
        try:
            seconds = env.parse_duration(str(every)).total_seconds()
        except ValueError:
            raise bad(f"every {every!r} is not a duration such as 5s, 10m, 1h") from None
    else:
        raise bad(f"every is a duration such as 5s, not {every!r}")
    if seconds < 1 or seconds != int(seconds):
        raise bad(f"every is a whole number of seconds, at least 1s, not {every!r}")
    return int(seconds)


def _task_name(task, bad) -> tuple[str, bool]:
    """The stored name of ``task`` and whether it is a django.tasks task."""
    from django.tasks import Task
    from django.utils.module_loading import import_string

    from jobs.task import JobTask
    from project.celery import app

    if isinstance(task, Task):
        return task.module_path, True
    name = getattr(task, "name", task)
    if not isinstance(name, str) or not name:
        raise bad(f"task is a task name, not {task!r}")
    if name in app.tasks:
        if not isinstance(app.tasks[name], JobTask):
            raise bad(f"task {name!r} is a plain Celery task: a schedule runs a JobTask")
        return name, False
    try:
        found = import_string(name) if "." in name else None
    except ImportError:
        found = None
    if isinstance(found, Task):
        return found.module_path, True
    raise bad(f"unknown task {name!r} (neither a Celery task nor a django.tasks task)")
