"""The claim of a job whose queue or task is limited: exact across every worker and host.

Its claims take turns: one transaction locks the queue's state row (FOR UPDATE if the queue
has a ``CONVEYOR_QUEUE_CONCURRENCY`` limit, else FOR KEY SHARE, as a pause expects) and the
task's (FOR UPDATE), then counts what runs in statements that come after the lock, which see
every claim committed before the locks were granted (on PostgreSQL the task's count is part
of the pick's own statement). In that order:

1. a paused queue or task starts nothing;
2. the queue's limit and the task's ``concurrency`` count running rows;
3. the task's ``rate`` keeps its latest start times on its state row (a sliding window);
4. the pick skips jobs whose key is at its ``key_concurrency`` or whose key's rate window is
   full, and with ``fair`` takes the key that started least recently first;
5. the key's state row records the start (per-key rate, fairness).

A job held back stays queued and spends no attempt. Its doorbell is dropped when a slot is
what it waits for: the refusal marks the state row (``held_at``), and the next run of the
queue or task to end rings for the best due job (``wake``) until one finds none due; a limit
that doesn't bind sends no extra doorbell. When a rate is what it waits for it is rung again
for when the window frees: with every doorbell its message had left (``doorbells``, a batch
message's unused ids), so a backlog of a rated task sent in batch messages keeps its
doorbells until each has claimed a job. Times are the workers' clocks: keep the hosts
in NTP.

On PostgreSQL a claim under limits without a rate or fairness sends the lock and the pick in
one round trip, decided in SQL (jobs.claim_at_once); this module's statement-at-a-time path
is the rest, and the reference that one is tested against.
"""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from django.db import connection, transaction
from django.utils import timezone

from jobs import claim_at_once, conf, limits, statements
from jobs.limits import Limit, Rate
from jobs.models import PENDING, Job, JobStatus, LimitKeyState, QueueState, TaskState
from jobs.publish import SCHEDULE_HORIZON_SECONDS, publish_on_commit, ring_later

S = JobStatus
TABLE = statements.TABLE
KEY_TABLE = LimitKeyState._meta.db_table


@dataclass(frozen=True)
class Plan:
    """What limits the claim for a message: its queue's limit (if any) and its task's."""

    queue_limit: int | None = None
    limit: Limit | None = None

    @property
    def takes_chunks(self) -> bool:
        """Whether a claim may take several jobs at once: only slots count (no rate, no key
        rule, no fairness), so one count under the lock covers them all."""
        limit = self.limit
        return limit is None or not (
            limit.task_rate or limit.key_rate or limit.key_concurrency or limit.fair
        )


@dataclass(frozen=True)
class Holds:
    """What the claim's lock read: the queue, and whether a claim was refused for its slots
    or the task's since the last end that found none (``held_at``, see ``wake``)."""

    queue: str
    queue_held: bool
    task_held: bool


def claim(plan: Plan, job_id: int, *, task: str, worker: str, only: int | None = None):
    """Claim the best job of ``task`` in ``job_id``'s queue that its limits let start, or None.

    ``only``: that job or nothing. ``job_id`` is the job the message names (rung again if a
    rate window holds it).
    """
    if claim_at_once.applies(plan):
        claimed = claim_at_once.claim(plan, job_id, task=task, worker=worker, only=only)
        if claimed.locked:
            return claimed.jobs[0] if claimed.jobs else None
    with transaction.atomic():
        jobs = _claim(plan, job_id, task, worker, only, 1)[0]
    return jobs[0] if jobs else None


def claim_reading_holds(
    plan: Plan,
    job_id: int,
    *,
    task: str,
    worker: str,
    count: int = 1,
    doorbells: Sequence[int] | None = None,
):
    """``claim`` of up to ``count`` jobs inside the caller's transaction (runs' ends just
    written in it); return the claimed jobs, best first, and the ``Holds`` its lock read
    (None if the job is gone). More than one only under a limit that counts slots alone
    (``Plan.takes_chunks``). ``doorbells``: what a rate window that refuses the claim rings
    again when it frees: None, ``job_id``'s doorbell; ids (``job_id`` first), those a batch
    message has not used yet; empty, none (the caller rings them: jobs.batches).

    The marks are read under the claim's lock, after the ends: an end that rides on a claim
    needs no read of its own to know whether to ring (jobs.completer).
    """
    return _claim(plan, job_id, task, worker, None, count, doorbells)


def _claim(
    plan: Plan,
    job_id: int,
    task: str,
    worker: str,
    only: int | None,
    count: int,
    doorbells: Sequence[int] | None = None,
):
    limit = plan.limit
    if not plan.takes_chunks:
        count = 1
    locked, job_id, doorbells = _lock_for_one_of(plan, task, job_id, doorbells)
    if locked is None:  # the job is gone
        return [], None
    queue, paused, starts, holds = locked
    if paused:
        return [], holds
    if plan.queue_limit is not None:
        free = plan.queue_limit - _running(queue=queue)
        if free <= 0:
            _held(QueueState, queue)
            return [], holds
        count = chunk_within(count, free)
    # On PostgreSQL the pick counts the task's running rows itself (its statement comes
    # after the lock, so its snapshot sees every claim committed before); SQLite counts here.
    concurrency = limit.concurrency if limit is not None else None
    counted = bool(concurrency) and connection.vendor == "postgresql"
    if concurrency and not counted:
        free = concurrency - _running(task=task)
        if free <= 0:
            _held(TaskState, task)
            return [], holds
        count = chunk_within(count, free)
    # Stamped after the counts done so far, so a run that took a freed slot does not start,
    # on record, before the run that freed it ended. The counts in the pick's statement
    # (the task's on PostgreSQL, the keys') read a snapshot taken a moment after this
    # stamp: an end committed within that moment can still look later than the start.
    now = timezone.now()
    rate = limit.task_rate if limit is not None else None
    if rate is not None:
        free_at = _window_free_at(starts, rate, now)
        if free_at is not None:
            _ring_at(job_id, free_at, doorbells)
            return [], holds
    jobs, full = _pick_and_claim(queue, limit, task, worker, now, only, counted, count)
    if full:  # the task's slots ran out before the chunk was whole
        _held(TaskState, task)
    if not jobs:
        if limit is not None and limit.key_rate:
            _ring_when_a_key_frees(job_id, task, now, doorbells)
        if limit is not None and limit.key_concurrency and _any_due(TaskState, task, queue):
            _held(TaskState, task)  # its keys' slots may be what holds it
        return [], holds
    if rate is not None:  # one job: a rate claims one at a time
        _record_task_start(task, starts, rate, now)
    if limit is not None and (limit.key_rate or limit.fair):
        _record_key_start(task, jobs[0].limit_key, limit.per_key_rate, now)
    return jobs, holds


def _lock_for_one_of(plan: Plan, task: str, job_id: int, doorbells: Sequence[int] | None):
    """``_lock`` for ``job_id``'s queue, or if that job is gone for the first of
    ``doorbells`` (``job_id`` first) that is not: a message rung again by a rate may name jobs
    deleted meanwhile. Return what it read (None: all gone), the job it named and the
    doorbells from that one on."""
    candidates = list(doorbells) if doorbells else [job_id]
    for position, anchor in enumerate(candidates):
        locked = _lock(anchor, task, exclusive_queue=plan.queue_limit is not None)
        if locked is not None:
            return locked, anchor, candidates[position:] if doorbells else doorbells
    return None, job_id, doorbells


def _lock(job_id: int, task: str, *, exclusive_queue: bool):
    """Lock the job's queue's state row and the task's; return (queue, paused, starts, holds).

    One statement when both rows exist (every worker makes them at start); a missing one is
    made first. None if the job is gone.
    """
    sql = statements.limited_lock_sql(connection.vendor, exclusive_queue)
    with connection.cursor() as cursor:
        cursor.execute(sql, [task, job_id])
        row = cursor.fetchone()
        if row is None:
            queue = statements.queue_of(job_id)
            if queue is None:
                return None
            now = timezone.now()
            QueueState.objects.bulk_create(
                [QueueState(name=queue, updated_at=now)], ignore_conflicts=True
            )
            TaskState.objects.bulk_create(
                [TaskState(name=task, updated_at=now)], ignore_conflicts=True
            )
            cursor.execute(sql, [task, job_id])
            row = cursor.fetchone()
    queue, paused, starts, queue_held, task_held = row
    starts = json.loads(starts) if isinstance(starts, str) else starts
    return queue, bool(paused), starts, Holds(queue, bool(queue_held), bool(task_held))


def chunk_within(count: int, free: int) -> int:
    """How many jobs a chunk claim of ``count`` takes with ``free`` slots left: all of them
    while the free slots are at least twice that, else one (see jobs.batches)."""
    return count if free >= 2 * count else min(1, free)


def _held(model, name: str) -> None:
    """Mark that a claim was refused for ``name``'s slots (under its row's lock), so the next
    run's end rings for it (``wake``); every refusal writes its own time."""
    model.objects.filter(name=name).update(held_at=timezone.now())


def wake(model, name: str, ring: Callable[[], int]) -> None:
    """A run of ``name`` (a QueueState or TaskState row) ended, its slot free: ``ring`` for
    the next job if a claim was refused since the last end that found nothing held.

    Without a refusal no doorbell is sent: a limit that doesn't bind costs one read per end,
    and nothing for a success that rides on the next claim (its lock reads the marks) or is
    written alone on PostgreSQL (its statement reads them: jobs.statements,
    ``end_successes_reading_marks``). The
    read waits for a claim holding the row (FOR KEY SHARE against its FOR UPDATE), so a
    refusal decided before this run's end committed is seen (SQLite's writers take turns at
    BEGIN). The mark is cleared only if no refusal came since it was read and no job is due
    as a claim counts due (its clock skew allowed): a ring that sent nothing because the
    broker was away, or because the job is due only on a faster clock, leaves it.
    """
    table = connection.ops.quote_name(model._meta.db_table)
    lock = " FOR KEY SHARE" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT held_at FROM {table} WHERE name = %s{lock}", [name])
        row = cursor.fetchone()
        if row is None or row[0] is None or ring() or _any_due(model, name):
            return
        cursor.execute(
            f"UPDATE {table} SET held_at = NULL WHERE name = %s AND held_at = %s", [name, row[0]]
        )


def _any_due(model, name: str, queue: str | None = None) -> bool:
    """Whether a job of the queue or task ``name`` (in ``queue``, if given) is due, as a
    claim would take it."""
    where = {"task": name} if model is TaskState else {"queue": name}
    if queue is not None:
        where["queue"] = queue
    due = timezone.now() + statements.CLAIM_CLOCK_SKEW
    pending = Job.objects.filter(
        status__in=PENDING, run_after__lte=due, cancel_requested_at__isnull=True, **where
    )
    return pending.exists()


def _running(**where) -> int:
    return Job.objects.filter(status=S.RUNNING, **where).order_by().count()


def _window(starts: list, rate: Rate, now: datetime) -> list[float]:
    """The start times (epoch seconds) still inside the window that ends now, oldest first."""
    cutoff = (now - rate.period).timestamp()
    return sorted(float(t) for t in starts if float(t) > cutoff)


def _window_free_at(starts: list, rate: Rate, now: datetime) -> datetime | None:
    """When the window next has room, or None if it has room now."""
    inside = _window(starts, rate, now)
    if len(inside) < rate.count:
        return None
    oldest = inside[-rate.count]
    return datetime.fromtimestamp(oldest, tz=now.tzinfo) + rate.period


def _started(starts: list, rate: Rate, now: datetime) -> tuple[list[float], datetime | None]:
    """The window with a start at ``now`` added, and when it is full until (None: room)."""
    inside = (_window(starts, rate, now) + [now.timestamp()])[-rate.count :]
    return inside, _window_free_at(inside, rate, now)


def _record_task_start(task: str, starts: list, rate: Rate, now: datetime) -> None:
    inside, full_until = _started(starts, rate, now)
    TaskState.objects.filter(name=task).update(starts=inside, full_until=full_until, updated_at=now)


def _record_key_start(task: str, key: str, rate: Rate | None, now: datetime) -> None:
    state = LimitKeyState.objects.filter(task=task, key=key).first()
    starts, full_until = _started(state.starts if state else [], rate, now) if rate else ([], None)
    LimitKeyState.objects.update_or_create(
        task=task,
        key=key,
        defaults={"starts": starts, "full_until": full_until, "last_started_at": now},
    )


def _ring_at(job_id: int, when: datetime, doorbells: Sequence[int] | None = None) -> None:
    """Ring for ``job_id`` again once ``when`` has come (after this transaction commits);
    ``doorbells`` (see ``claim_reading_holds``): a batch message's unused ids, all of them,
    or none at all.

    No later than the publish horizon (an hour's window can be full for longer, and a
    doorbell beyond the horizon is not sent): a claim then looks again and re-rings.
    """
    if doorbells is not None and not doorbells:  # the caller rings them
        return
    job = Job.objects.filter(pk=job_id).only("id", "task", "queue").first()
    if job is None:
        return
    horizon = timezone.now() + timedelta(seconds=SCHEDULE_HORIZON_SECONDS)
    job.run_after = min(when + timedelta(milliseconds=5), horizon)
    if doorbells is not None and len(doorbells) > 1:
        ids = list(doorbells)
        transaction.on_commit(
            lambda: ring_later(job.task, job.queue, ids, job.run_after), robust=True
        )
    else:
        publish_on_commit([job])


def _ring_when_a_key_frees(
    job_id: int, task: str, now: datetime, doorbells: Sequence[int] | None = None
) -> None:
    """Nothing could start: if a key's rate window is what holds them, ring when it frees."""
    held = LimitKeyState.objects.filter(task=task, full_until__gt=now).order_by("full_until")
    first = held.values_list("full_until", flat=True).first()
    if first is not None:
        _ring_at(job_id, first, doorbells)


@cache
def _pick_sql(vendor: str, limit: Limit | None, only: bool, counted: bool) -> str:
    """The claim's UPDATE for a limited task: the pick with the task's key rules.

    ``counted`` (PostgreSQL): the statement also counts the task's running rows, picks only
    up to its ``concurrency``, and answers (running count, claimed row or NULLs) per row.
    """
    rules = []
    if limit is not None and limit.key_concurrency:
        rules.append(
            f"AND (SELECT count(*) FROM {TABLE} r WHERE r.task = j.task "
            f"AND r.limit_key = j.limit_key AND r.status = '{S.RUNNING}') < %s"
        )
    if limit is not None and limit.key_rate:
        rules.append(
            f"AND NOT EXISTS (SELECT 1 FROM {KEY_TABLE} k WHERE k.task = j.task "
            "AND k.key = j.limit_key AND k.full_until > %s)"
        )
    order = "j.priority DESC, j.run_after, j.id"
    if limit is not None and limit.fair:
        least_recent = (
            f"(SELECT k.last_started_at FROM {KEY_TABLE} k "
            "WHERE k.task = j.task AND k.key = j.limit_key)"
        )
        order = f"{least_recent} IS NOT NULL, {least_recent}, {order}"
    count = "%s"
    if counted:  # chunk_within(count, free slots), in SQL
        free = "(%s - (SELECT running FROM n))"
        count = claim_at_once.chunk_sql("%s", free)
    pick = (
        f"SELECT j.id FROM {TABLE} j WHERE j.queue = %s AND j.task = %s "
        f"AND {statements.runnable('j')} {'AND j.id = %s' if only else ''} "
        f"{' '.join(rules)} ORDER BY {order} LIMIT {count}"
    )
    if vendor == "postgresql":
        pick += " FOR UPDATE OF j SKIP LOCKED"
        where = f"WHERE id = ANY(ARRAY({pick}))"
    else:
        where = f"WHERE id IN ({pick})"
    update = f"{statements.SET_RUNNING.strip()} {where} RETURNING {statements.COLUMNS}"
    if not counted:
        return update
    return (
        f"WITH n AS MATERIALIZED (SELECT count(*) AS running FROM {TABLE} "
        f"WHERE task = %s AND status = '{S.RUNNING}'), "
        f"claimed AS ({update}) "
        "SELECT (SELECT running FROM n), claimed.* FROM (SELECT 1) AS one "
        "LEFT JOIN claimed ON true"
    )


def _pick_and_claim(
    queue,
    limit,
    task: str,
    worker: str,
    now: datetime,
    only: int | None,
    counted: bool,
    count: int,
) -> tuple[list[Job], bool]:
    """Claim the best jobs (up to ``count``) the task's key rules let start; return them,
    best first, and whether the task's ``concurrency`` cut the chunk short (``counted``)."""
    when = connection.ops.adapt_datetimefield_value
    params = [task] if counted else []
    params += [*statements.running_params(worker, now), queue, task]
    params.append(when(now + statements.CLAIM_CLOCK_SKEW))
    if only is not None:
        params.append(only)
    if limit is not None and limit.key_concurrency:
        params.append(limit.key_concurrency)
    if limit is not None and limit.key_rate:
        params.append(when(now))
    if counted:
        params += [limit.concurrency, count, count, limit.concurrency]
    else:
        params.append(count)
    with connection.cursor() as cursor:
        cursor.execute(_pick_sql(connection.vendor, limit, only is not None, counted), params)
        rows = cursor.fetchall()
    if not counted:
        return statements.in_claim_order(map(statements.job_from_row, rows)), False
    running = rows[0][0]
    jobs = statements.in_claim_order(
        statements.job_from_row(row[1:]) for row in rows if row[1] is not None
    )
    return jobs, len(jobs) < count and running + len(jobs) >= limit.concurrency


NOTHING_HOLDS = "nothing holds it back: it waits for a free worker of its queue (or its turn)"


def why_waiting(job: Job) -> str:
    """Why a queued or retrying job has not started, in a sentence (empty if nothing holds it).

    For operators: a snapshot of the same rules the claim keeps, not a promise.
    """
    from project.celery import app

    if job.status not in (S.QUEUED, S.RETRYING):
        return ""
    now = timezone.now()
    if job.run_after > now:
        return f"due at {job.run_after:%Y-%m-%d %H:%M:%S} UTC"
    if QueueState.objects.filter(name=job.queue, paused_at__isnull=False).exists():
        return f"its queue {job.queue!r} is paused"
    state = TaskState.objects.filter(name=job.task).first()
    if state is not None and state.paused_at is not None:
        return f"its task {job.task!r} is paused"
    queue_limit = conf.get().queue_concurrency.get(job.queue)
    if queue_limit is not None and _running(queue=job.queue) >= queue_limit:
        return f"its queue is at its concurrency limit ({queue_limit} running)"
    limit = limits.limit_of(app.tasks.get(job.task))
    if limit is None:
        return NOTHING_HOLDS
    if limit.concurrency and _running(task=job.task) >= limit.concurrency:
        return f"its task is at its concurrency limit ({limit.concurrency} running)"
    if limit.key_concurrency and (
        _running(task=job.task, limit_key=job.limit_key) >= limit.key_concurrency
    ):
        return f"its key {job.limit_key} is at its limit ({limit.key_concurrency} running)"
    if state is not None and state.full_until is not None and state.full_until > now:
        return f"its task's rate ({limit.rate}) is used up until {state.full_until:%H:%M:%S} UTC"
    key = LimitKeyState.objects.filter(task=job.task, key=job.limit_key).first()
    if key is not None and key.full_until is not None and key.full_until > now:
        return f"its key's rate ({limit.key_rate}) is used up until {key.full_until:%H:%M:%S} UTC"
    return NOTHING_HOLDS
