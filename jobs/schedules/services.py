"""Operate schedules: reconcile them from code, pause and resume them, run one now.

``schedules_install()`` (called by ``manage.py setup_periodic_tasks``) makes the ``Schedule``
rows what the code and ``CONVEYOR_SCHEDULES`` declare and says, per schedule, ``added``,
``changed`` (with what), ``unchanged`` or ``removed``:

* the definition belongs to the code: an edit there is applied, and a change of when it runs
  (cron, every, zone), or enabling it again, starts it afresh from the next slot after now
  (no backlog is fired);
* paused/resumed belongs to the operator and survives a reconcile;
* a row the code no longer declares is removed, with its run records (its jobs stay).

Pause, resume and run-now are audited (AuditLog ``schedule.pause``, ``schedule.resume``,
``schedule.run_now``). A resumed schedule starts from the next slot after now: the slots of
a pause are not missed slots. A run now is a separate job, ``"slot": null`` and
``"run_now": true`` in its payload, recorded as a ``manual`` run: it consumes no slot.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from jobs.models import AuditLog, Schedule, ScheduleRun, ScheduleRunKind
from jobs.schedules.fire import enqueue_job
from jobs.schedules.slots import next_slots
from jobs.schedules.spec import Resolved, declared

logger = logging.getLogger("jobs.schedules")
# Fields whose change moves the schedule's next slot.
TIMING = ("cron", "every_seconds", "timezone")
DEFINITION = (
    "task", "django_task", "cron", "every_seconds", "timezone", "payload", "queue", "priority",
    "missed", "missed_cap", "enabled",
)  # fmt: skip


class UnknownSchedule(LookupError):
    """No schedule has this name."""


@dataclass(frozen=True)
class InstallResult:
    action: str  # added | changed | unchanged | removed
    name: str
    changes: tuple[str, ...] = ()
    paused: bool = False

    def describe(self) -> str:
        line = f"schedule {self.action}: {self.name}"
        if self.changes:
            line += f" ({'; '.join(self.changes)})"
        if self.paused:
            line += " [paused by an operator]"
        return line


@transaction.atomic
def schedules_install(
    specs: list[Resolved] | None = None, *, now: datetime | None = None
) -> list[InstallResult]:
    """Make the Schedule rows what is declared (``specs``: what the code and settings
    declare); return one result per schedule."""
    specs = declared() if specs is None else specs
    now = now or timezone.now()
    results = []
    existing = {row.name: row for row in Schedule.objects.select_for_update()}
    for spec in specs:
        row = existing.pop(spec.name, None)
        wanted = {name: getattr(spec, name) for name in DEFINITION}
        if row is None:
            row = Schedule(name=spec.name, created_at=now, updated_at=now, **wanted)
            row.next_slot = _first_slot(row, now)
            row.save()
            results.append(InstallResult("added", spec.name))
            continue
        changes = [
            f"{name} was {getattr(row, name)!r}"
            for name in DEFINITION
            if getattr(row, name) != wanted[name]
        ]
        if changes:
            retimed = any(getattr(row, name) != wanted[name] for name in TIMING)
            retimed |= wanted["enabled"] and not row.enabled  # enabled again: from now on
            for name, value in wanted.items():
                setattr(row, name, value)
            if retimed or row.next_slot is None:
                row.next_slot = _first_slot(row, now)
            row.updated_at = now
            row.save()
        action = "changed" if changes else "unchanged"
        results.append(InstallResult(action, spec.name, tuple(changes), row.paused_at is not None))
    for name, row in sorted(existing.items()):
        row.delete()
        results.append(InstallResult("removed", name, ("no longer declared",)))
    for result in results:
        if result.action != "unchanged":
            logger.info(
                "schedule.installed", extra={"schedule": result.name, "action": result.action}
            )
    return results


def _first_slot(row: Schedule, now: datetime) -> datetime | None:
    found = next_slots(row, now, 1)
    return found[0] if found else None


def _locked(name: str) -> Schedule:
    row = Schedule.objects.select_for_update().filter(name=name).first()
    if row is None:
        raise UnknownSchedule(f"no schedule is named {name!r}")
    return row


@transaction.atomic
def schedule_pause(*, name: str, actor: str) -> Schedule:
    """Pause ``name`` (audited); its slots are not fired until it is resumed."""
    row = _locked(name)
    was_paused = row.paused_at is not None
    if not was_paused:
        row.paused_at, row.paused_by = timezone.now(), actor
        row.save(update_fields=["paused_at", "paused_by"])
    _audit(actor, "schedule.pause", row, was_paused=was_paused)
    return row


@transaction.atomic
def schedule_resume(*, name: str, actor: str) -> Schedule:
    """Resume ``name`` (audited) from its next slot after now."""
    row = _locked(name)
    was_paused = row.paused_at is not None
    if was_paused:
        now = timezone.now()
        row.paused_at, row.paused_by = None, ""
        row.next_slot = _first_slot(row, now)
        row.save(update_fields=["paused_at", "paused_by", "next_slot"])
    _audit(actor, "schedule.resume", row, was_paused=was_paused)
    return row


@transaction.atomic
def schedule_run_now(*, name: str, actor: str) -> ScheduleRun:
    """Enqueue one job of ``name`` now, outside its slots (audited); return its run."""
    row = _locked(name)
    now = timezone.now()
    # A django.tasks function gets the payload as keyword arguments: only the slot it is
    # documented to take (None: a run outside the slots); the run's record says who asked.
    extra = {"slot": None}
    if not row.django_task:
        extra.update(run_now=True, requested_by=actor)
    job = enqueue_job(row, extra, run_after=now)
    run = ScheduleRun.objects.create(
        schedule=row,
        kind=ScheduleRunKind.MANUAL,
        slot=now,
        job=job,
        requested_by=actor,
        created_at=now,
    )
    _audit(actor, "schedule.run_now", row, job_id=job.pk)
    return run


def _audit(actor: str, action: str, row: Schedule, **details) -> None:
    AuditLog.objects.create(
        actor=actor,
        action=action,
        target_type="schedule",
        target_id=row.name,
        details=details,
    )
    logger.info(action, extra={"schedule": row.name, "actor": actor, **details})
