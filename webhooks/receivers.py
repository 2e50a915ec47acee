"""Listen to the job engine's ``job_dead`` signal.

* A dead ``webhooks.deliver`` job marks its delivery dead and counts towards disabling the
  endpoint (the engine has already written the AuditLog row and the ``webhook.dead_letter``
  notices to staff).
* Any other dead job is announced as the ``job.dead`` topic. A webhook job is never announced
  as a webhook, so a failing receiver cannot feed itself.
"""

import logging

from django.db import transaction

from jobs.models import Job
from jobs.services import notify_staff
from webhooks import services
from webhooks.dispatch import DELIVER_TASK, notify

logger = logging.getLogger("webhooks")


def on_job_dead(sender, job: Job, **kwargs) -> None:
    """Handle one dead job; never let a failure here undo the burial that sent the signal."""
    try:
        with transaction.atomic():
            if job.task == DELIVER_TASK:
                services.delivery_mark_dead(job)
            elif not job.task.startswith("webhooks."):
                notify("job.dead", job_dead_data(job))
    except Exception as exc:  # a bug: the burial stands, operators are told what was missed
        logger.exception("webhook.job_dead_failed", extra={"job_id": job.pk, "task": job.task})
        notify_staff(
            topic="webhook.job_dead_failed",
            title=f"the dead {job.task} job {job.pk} could not be followed up",
            body=f"{type(exc).__name__}: {exc}"[:2000],
            data={"job_id": job.pk, "task": job.task},
        )


def job_dead_data(job: Job) -> dict:
    """Return the ``data`` of a ``job.dead`` event."""
    return {
        "title": f"{job.task} job {job.pk} is dead",
        "job_id": job.pk,
        "task": job.task,
        "queue": job.queue,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "error": job.last_error[:1000],
        "finished_at": job.finished_at,
    }
