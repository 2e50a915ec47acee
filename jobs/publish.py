"""Ring the doorbell: publish job ids to the broker, never failing the caller.

A publish that fails is logged and left to the sweeper, which re-sends any job that is due
and still unclaimed. The publish retry policy is deliberately short so a broker outage never
stalls a web request for long.
"""

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from functools import cache

from celery import Celery, Task
from django.utils import timezone
from kombu.exceptions import KombuError

from jobs import conf
from jobs.models import Job
from project.broker import DOORBELL_HEADER

logger = logging.getLogger("jobs")

PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
SCHEDULE_HORIZON_SECONDS = conf.SCHEDULE_HORIZON_SECONDS  # see jobs.conf


# Marks a message as a job's doorbell: the job's row is its record (project.redis_broker).
DOORBELL_HEADERS = {DOORBELL_HEADER: True}

# A batch is split so that even a modest fan-out reaches several workers at once.
MIN_MESSAGES_PER_FANOUT = 16


def messages(
    jobs: Iterable[Job], *, now: datetime | None = None
) -> list[tuple[str, str, object, float]]:
    """Group ``jobs`` into messages: ``(task, queue, id or [ids], countdown)``.

    Jobs due now of a batchable task share messages of up to ``CONVEYOR_BATCH_SIZE`` ids
    (fewer when there are few jobs, so a fan-out still spreads over workers); the rest get
    one message each. Jobs beyond the publish horizon are left to the sweeper.
    """
    from project.celery import app

    now = now or timezone.now()
    size = conf.get().batch_size
    single, groups = [], defaultdict(list)
    for job in jobs:
        countdown = max(0.0, (job.run_after - now).total_seconds())
        if countdown > SCHEDULE_HORIZON_SECONDS:
            continue
        task = app.tasks.get(job.task)
        if countdown == 0 and batchable(task):
            groups[(job.task, job.queue)].append(job.pk)
        else:
            single.append((job.task, job.queue, job.pk, countdown))
    for (task, queue), ids in groups.items():
        step = max(1, min(size, len(ids) // MIN_MESSAGES_PER_FANOUT))
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step]
            single.append((task, queue, chunk if len(chunk) > 1 else chunk[0], 0.0))
    return single


def batchable(task: Task | None) -> bool:
    """Whether ``task``'s jobs may share a message: batches are on (``CONVEYOR_BATCH_SIZE`` >
    1), the task allows them (``batch``) and has no time limit (Celery's time limits apply
    per message, so a time-limited task's jobs go one by one)."""
    if conf.get().batch_size <= 1 or not getattr(task, "batch", False):
        return False
    return not (task.time_limit or task.soft_time_limit)


def publish(jobs: Iterable[Job]) -> int:
    """Send the jobs' ids to the broker (see ``messages``); return how many jobs were sent."""
    return _send(messages(jobs))


def ring_later(task: str, queue: str, ids: list[int], when: datetime) -> int:
    """Send ``ids`` doorbells for ``task`` in ``queue``, due at ``when``: a batch message's
    unused doorbells, rung again when a rate window frees (jobs.limiter). In messages of up
    to ``CONVEYOR_BATCH_SIZE`` ids (one each if the task's jobs may no longer share one);
    their claims take the best runnable jobs, whichever the ids are."""
    from project.celery import app

    countdown = max(0.0, (when - timezone.now()).total_seconds())
    step = conf.get().batch_size if batchable(app.tasks.get(task)) else 1
    chunks = (ids[start : start + step] for start in range(0, len(ids), step))
    return _send((task, queue, c if len(c) > 1 else c[0], countdown) for c in chunks)


def _send(outgoing: Iterable[tuple[str, str, object, float]]) -> int:
    """Send ``(task, queue, id or [ids], countdown)`` messages; return how many ids went. A
    broker that is away is logged, not raised: the sweeper re-sends what did not go out."""
    from project.celery import app

    sent = 0
    errors = broker_errors(app)
    try:
        with app.producer_or_acquire() as producer:
            for task, queue, ids, countdown in outgoing:
                app.send_task(
                    task,
                    args=[ids],
                    queue=queue,
                    countdown=countdown or None,
                    producer=producer,
                    retry=True,
                    retry_policy=PUBLISH_RETRY_POLICY,
                    headers=DOORBELL_HEADERS,
                )
                sent += len(ids) if isinstance(ids, list) else 1
    except errors as exc:
        logger.warning("job.publish_failed", extra={"error": repr(exc), "published": sent})
    return sent


@cache
def broker_errors(app: Celery) -> tuple[type[BaseException], ...]:
    """What a broker that is away or refusing raises, for this transport (kombu's own lists).

    Anything else a publish raises is a bug and propagates.
    """
    with app.connection_for_write() as connection:
        return (KombuError, OSError, *connection.connection_errors, *connection.channel_errors)


def publish_on_commit(jobs: list[Job]) -> None:
    """Publish ``jobs`` once the current transaction commits (at once outside one)."""
    from django.db import transaction

    transaction.on_commit(lambda: publish(jobs), robust=True)
