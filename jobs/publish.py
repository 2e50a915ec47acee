"""Ring the doorbell: publish job ids to the broker, never failing the caller.

A publish that fails is logged and left to the sweeper, which re-sends any job that is due
and still unclaimed. The publish retry policy is deliberately short so a broker outage never
stalls a web request for long.
"""

import logging
from collections.abc import Iterable

from django.utils import timezone

from jobs.models import Job

logger = logging.getLogger("jobs")

PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
# Further in the future than this, a job is not published at enqueue: a countdown is held
# unacknowledged in a worker's memory, so the sweeper publishes it when it comes due.
SCHEDULE_HORIZON_SECONDS = 1800


def publish(jobs: Iterable[Job]) -> int:
    """Send one message per job (its id only); return how many were sent."""
    from project.celery import app

    sent = 0
    now = timezone.now()
    try:
        with app.producer_or_acquire() as producer:
            for job in jobs:
                countdown = max(0.0, (job.run_after - now).total_seconds())
                if countdown > SCHEDULE_HORIZON_SECONDS:
                    continue
                app.send_task(
                    job.task,
                    args=[job.pk],
                    queue=job.queue,
                    countdown=countdown or None,
                    retries=job.attempts,
                    producer=producer,
                    retry=True,
                    retry_policy=PUBLISH_RETRY_POLICY,
                )
                sent += 1
    except Exception as exc:  # the sweeper re-sends whatever did not go out
        logger.warning("job.publish_failed", extra={"error": repr(exc), "published": sent})
    return sent


def publish_on_commit(jobs: list[Job]) -> None:
    """Publish ``jobs`` once the current transaction commits (at once outside one)."""
    from django.db import transaction

    transaction.on_commit(lambda: publish(jobs), robust=True)
