"""The ``webhooks.deliver`` task (one attempt per run, retried by the job engine) and purge.

Retries are decided by jobs.outcome with exponential backoff and full jitter
(``CONVEYOR_WEBHOOK_BACKOFF`` × 2^n, capped at ``CONVEYOR_WEBHOOK_BACKOFF_MAX``); a
``Retry-After`` header replaces the backoff, capped at ``CONVEYOR_WEBHOOK_RETRY_AFTER_MAX``.
Once ``CONVEYOR_WEBHOOK_MAX_ATTEMPTS`` are spent the job is dead and the ``job_dead``
receiver marks the delivery dead. Deliveries go one per message (``batch = False``): they
wait on receivers, so they spread over a thread pool rather than queue behind each other.
Each endpoint gets at most ``CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY`` of them at once and
``CONVEYOR_WEBHOOK_ENDPOINT_RATE`` starts, everywhere (the task's Limit, by endpoint).
"""

from celery import shared_task

from jobs import Permanent, RetryAfter
from jobs.limits import Limit
from jobs.maintenance import runs
from jobs.task import JobContext, JobTask
from webhooks import conf
from webhooks.delivery import delivery_attempt
from webhooks.dispatch import DELIVER_TASK
from webhooks.maintenance.purge import purge_webhooks as purge
from webhooks.models import AttemptOutcome

_settings = conf.get()
# A hung attempt is cut by the transport's own deadline (2 × timeout); these are backstops.
SOFT_TIME_LIMIT = int(_settings.timeout * 3) + 15
TIME_LIMIT = SOFT_TIME_LIMIT + 15


class DeliveryFailed(RetryAfter):
    """A retryable failure: 408/425/429/5xx, no answer, a timeout or a DNS failure."""


@shared_task(
    base=JobTask,
    name=DELIVER_TASK,
    batch=False,
    retry_backoff=_settings.backoff,
    retry_backoff_max=_settings.backoff_max,
    job_max_attempts=_settings.max_attempts,
    soft_time_limit=SOFT_TIME_LIMIT,
    time_limit=TIME_LIMIT,
    limit=Limit(
        key=("endpoint_id",),
        key_concurrency=_settings.endpoint_concurrency,
        key_rate=_settings.endpoint_rate,
    ),
)
def deliver(ctx: JobContext):
    """Attempt the delivery ``payload["delivery_id"]`` once and act on the outcome."""
    result = delivery_attempt(int(ctx.payload["delivery_id"]), job=ctx.job)
    if result.outcome == AttemptOutcome.DELIVERED:
        return {"status_code": result.status_code}
    if result.outcome == AttemptOutcome.SKIPPED:
        return {"skipped": result.error}
    if result.outcome == AttemptOutcome.RETRY:
        raise DeliveryFailed(result.error, seconds=result.retry_after)
    raise Permanent(result.error)


@shared_task(name="maintenance.purge_webhooks", ignore_result=True)
def purge_webhooks(force: bool = False) -> dict:
    """Delete finished deliveries and orphaned events past retention (webhooks.maintenance)."""
    return runs.run_task("purge_webhooks", purge, force=force)
