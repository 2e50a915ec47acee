"""The access app's maintenance task: the idempotency-key purge, run like every other runner."""

from celery import shared_task

from jobs.maintenance import runs
from project.access.purge import purge_idempotency_keys as purge


@shared_task(name="maintenance.purge_idempotency_keys", ignore_result=True)
def purge_idempotency_keys(force: bool = False) -> dict:
    """Delete idempotency keys past their retention (see project.access.purge)."""
    return runs.run_task("purge_idempotency_keys", purge, force=force)
