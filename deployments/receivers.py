"""Follow the job engine's signals for ``deployments.run`` jobs.

A dead job fails its deployment: the worker was lost (or the runner crashed). A waiting job
an operator cancelled in the jobs API or admin cancels its pending deployment.

``jobs`` buries a ``deployments.run`` job as ``dead`` when its worker process died under it
(at once, from the worker's parent process) or when its lease expired (the reaper), and
sends ``job_dead`` inside that same transaction. The job has ``max_attempts = 1``, so it is
never re-run; here the deployment becomes ``failed`` with ``worker_lost`` and announces it,
in the same transaction as the burial.
"""

import logging

from django.db import transaction
from django.dispatch import receiver

from deployments import lifecycle
from deployments.models import Deployment, DeploymentStatus, FailureReason
from deployments.services import RUN_TASK
from jobs.signals import job_cancelled, job_dead

logger = logging.getLogger("deployments")
LOST_PREFIX = "worker lost"


@receiver(job_dead, dispatch_uid="deployments.fail_deployment_of_dead_job")
def fail_deployment_of_dead_job(sender, job, **kwargs) -> None:
    """Fail the deployment of a dead ``deployments.run`` job, if it had not ended."""
    if job.task != RUN_TASK:
        return
    deployment_id = (job.payload or {}).get("deployment_id")
    if deployment_id is None:
        return
    lost = job.last_error.startswith(LOST_PREFIX)
    reason = FailureReason.WORKER_LOST if lost else FailureReason.INTERNAL_ERROR
    try:
        with transaction.atomic():  # a savepoint: a failure here must not undo the burial
            lifecycle.fail_lost(
                int(deployment_id), job_id=job.pk, reason=reason, error=job.last_error
            )
    except Exception:
        logger.exception(
            "deployment.fail_on_dead_job_failed",
            extra={"deployment_id": deployment_id, "job_id": job.pk},
        )


@receiver(job_cancelled, dispatch_uid="deployments.cancel_deployment_of_cancelled_job")
def cancel_deployment_of_cancelled_job(sender, job, actor: str, **kwargs) -> None:
    """Cancel the pending deployment whose job an operator cancelled in the jobs API/admin."""
    if job.task != RUN_TASK:
        return
    deployment_id = (job.payload or {}).get("deployment_id")
    deployment = Deployment.objects.filter(
        pk=deployment_id, job_id=job.pk, status=DeploymentStatus.PENDING
    ).first()
    if deployment is not None:
        lifecycle.cancel_pending(deployment, reason=FailureReason.CANCELLED, actor=actor)
