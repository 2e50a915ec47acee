"""Fire the slots that have come due: one job per (schedule, slot), whatever the beats do.

``fire_due()`` is the service behind ``maintenance.fire_schedules``, the one beat entry of
all schedules (every ``CONVEYOR_SCHEDULE_TICK``, 1s by default): beat itself does no
calendar or zone arithmetic, so a clock change cannot crash it. For each schedule whose
``next_slot`` has come, in one transaction holding that schedule's row lock
(``SELECT … FOR UPDATE SKIP LOCKED``: a twin tick passes it by), it

* plans the due slots by the missed-run policy (jobs.schedules.slots.plan);
* for each slot it fires, inserts a ``ScheduleRun`` (kind ``slot``) with ``ON CONFLICT DO
  NOTHING`` on the unique index of (schedule, slot) and, when that row is new, enqueues the
  job: payload = the schedule's payload plus ``"slot"`` (ISO 8601 UTC) and ``"schedule"``;
  ``run_after`` = the slot; idempotency key ``schedule:<name>:<slot>``;
* moves ``next_slot`` past ``now``, and records what a missed-run policy did.

So two beats, a restarted beat or a late tick make one job per slot: the row lock orders the
ticks, and the index would refuse a second run of a slot even without it. The job is written
when its slot comes, before it runs, and is visible on the console from then on. Logs:
``schedule.fired`` per job, ``schedule.missed`` when a policy was applied, and
``schedule.failed`` (with the traceback) when firing one schedule raised (its task is gone,
say): that schedule's transaction is rolled back and tried again next tick, and the other
schedules are not held back.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection, transaction
from django.utils import timezone

from jobs import services
from jobs.models import Schedule, ScheduleRun, ScheduleRunKind
from jobs.schedules import conf as schedule_conf
from jobs.schedules.slots import plan
from jobs.task_names import DJANGO_TASK

logger = logging.getLogger("jobs.schedules")
# Schedules looked at per tick; the rest wait for the next one (they are ordered by due).
BATCH = 200
# A schedule keeps this many runs; older ones go (their jobs stay, until purged).
RUNS_KEPT = 500


@dataclass(frozen=True)
class FireResult:
    schedules: int = 0  # schedules that had slots due
    fired: int = 0  # jobs enqueued for slots
    missed: int = 0  # slots later than the grace
    dropped: int = 0  # due slots not fired (by the missed-run policy)
    failed: int = 0  # schedules whose firing raised (logged as schedule.failed; tried again)


def slot_text(slot: datetime) -> str:
    """A slot as jobs carry it: ISO 8601 in UTC, e.g. ``2027-03-28T01:00:00Z``."""
    return slot.astimezone(UTC).isoformat().replace("+00:00", "Z")


def fire_due(now: datetime | None = None) -> FireResult:
    """Fire the due slots of every active schedule (see the module doc); return counts."""
    now = now or timezone.now()
    grace = schedule_conf.get().grace
    due = list(
        Schedule.objects.filter(
            enabled=True, paused_at__isnull=True, next_slot__isnull=False, next_slot__lte=now
        )
        .order_by("next_slot")
        .values_list("pk", flat=True)[:BATCH]
    )
    schedules = fired = missed = dropped = failed = 0
    for pk in due:
        try:
            outcome = _fire_one(pk, now, grace)
        except Exception as exc:  # rolled back; tried again next tick; the others go on
            failed += 1
            logger.exception(
                "schedule.failed",
                extra={"schedule_id": pk, "error": f"{exc.__class__.__name__}: {exc}"[:500]},
            )
            continue
        if outcome is None:  # a twin tick has it, or it was paused meanwhile
            continue
        decided, made = outcome
        schedules += 1
        fired += len(made)
        missed += decided.missed
        dropped += decided.due - len(decided.fire)
    return FireResult(
        schedules=schedules, fired=fired, missed=missed, dropped=dropped, failed=failed
    )


@transaction.atomic
def _fire_one(pk: int, now: datetime, grace):
    """Fire one schedule's due slots holding its row lock; None if another tick holds it."""
    schedule = (
        Schedule.objects.select_for_update(skip_locked=True)
        .filter(pk=pk, enabled=True, paused_at__isnull=True, next_slot__lte=now)
        .first()
    )
    if schedule is None:
        return None
    decided = plan(schedule, now, grace)
    made = [slot for slot in decided.fire if fire_slot(schedule, slot, now=now)]
    schedule.next_slot = decided.next_slot
    schedule.last_slot = decided.last_due or schedule.last_slot
    schedule.updated_at = now
    if decided.missed_any:
        _record_missed(schedule, decided, made, now)
    schedule.save()
    _trim_runs(schedule)
    return decided, made


def _record_missed(schedule: Schedule, decided, made: list[datetime], now: datetime) -> None:
    schedule.last_missed_at = now
    schedule.last_missed = {
        "policy": decided.policy,
        "due": decided.due,
        "missed": decided.missed,
        "fired": [slot_text(slot) for slot in made],
    }
    logger.warning(
        "schedule.missed",
        extra={"schedule": schedule.name, **schedule.last_missed},
    )


def fire_slot(schedule: Schedule, slot: datetime, *, now: datetime) -> bool:
    """Enqueue the job of ``slot`` unless the slot already has one; return whether it did."""
    run_id = _claim_slot(schedule, slot, now)
    if run_id is None:
        return False
    job = enqueue_job(schedule, {"slot": slot_text(slot)}, run_after=slot, slot=slot)
    ScheduleRun.objects.filter(pk=run_id).update(job=job)
    logger.info(
        "schedule.fired",
        extra={"schedule": schedule.name, "slot": slot_text(slot), "job_id": job.pk},
    )
    return True


def enqueue_job(schedule: Schedule, extra: dict, *, run_after: datetime, slot=None):
    """Enqueue one job of ``schedule`` with ``extra`` added to its payload."""
    payload = {**schedule.payload, **extra, "schedule": schedule.name}
    key = f"schedule:{schedule.name}:{slot_text(slot)}" if slot is not None else None
    if schedule.django_task:
        return _enqueue_django_task(schedule, payload, run_after=run_after, key=key)
    return services.enqueue(
        schedule.task,
        payload,
        queue=schedule.queue or None,
        priority=schedule.priority,
        run_after=run_after,
        idempotency_key=key,
    )


def _enqueue_django_task(schedule: Schedule, payload: dict, *, run_after, key):
    """A django.tasks task's job, as its backend writes one; its kwargs are the payload."""
    from django.utils.module_loading import import_string

    task = import_string(schedule.task)
    queue = schedule.queue or task.queue_name
    return services.enqueue(
        DJANGO_TASK,
        {
            "path": task.module_path,
            "args": [],
            "kwargs": payload,
            "takes_context": task.takes_context,
            "queue_name": queue,
            "priority": schedule.priority,
            "run_after": None,
            "backend": task.backend,
            "slot": payload.get("slot"),
            "schedule": schedule.name,
        },
        queue=queue,
        priority=schedule.priority,
        run_after=run_after,
        idempotency_key=key,
    )


def _claim_slot(schedule: Schedule, slot: datetime, now: datetime) -> int | None:
    """Insert the slot's run; None if the slot has one (the unique index said so)."""
    table = connection.ops.quote_name(ScheduleRun._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (schedule_id, kind, slot, requested_by, created_at) "
            "VALUES (%s, %s, %s, '', %s) "
            f"ON CONFLICT (schedule_id, slot) WHERE kind = '{ScheduleRunKind.SLOT}' "
            "DO NOTHING RETURNING id",
            [schedule.pk, ScheduleRunKind.SLOT, slot, now],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def _trim_runs(schedule: Schedule) -> None:
    """Keep the schedule's newest RUNS_KEPT runs (one step along its (schedule, slot) index)."""
    runs = ScheduleRun.objects.filter(schedule=schedule)
    oldest_kept = list(
        runs.order_by("-slot").values_list("slot", flat=True)[RUNS_KEPT - 1 : RUNS_KEPT]
    )
    if oldest_kept:
        runs.filter(slot__lt=oldest_kept[0]).delete()
