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


class DeliveryTask(JobTask):
    """The deliver task's options, read from the webhook settings in force when asked for.

    A hung attempt is cut by the transport's own deadline (2 × timeout); the time limits are
    backstops.
    """

    abstract = True
    batch = False

    @property
    def retry_backoff(self) -> int:
        return conf.get().backoff

    @property
    def retry_backoff_max(self) -> int:
        return conf.get().backoff_max

    @property
    def job_max_attempts(self) -> int:
        return conf.get().max_attempts

    @property
    def soft_time_limit(self) -> int:
        return int(conf.get().timeout * 3) + 15

    @property
    def time_limit(self) -> int:
        return self.soft_time_limit + 15

    @property
    def limit(self) -> Limit:
        return conf.delivery_limit()


class DeliveryFailed(RetryAfter):
    """A retryable failure: 408/425/429/5xx, no answer, a timeout or a DNS failure."""


@shared_task(base=DeliveryTask, name=DELIVER_TASK)
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
