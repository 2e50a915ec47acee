"""Follow the job engine's signals for ``deployments.run`` jobs.

A dead job fails its deployment, with a failure reason that follows the job's typed reason:
its worker process died under it or its lease expired → ``worker_lost``; it went past its
hard time limit → ``timed_out``; anything else (the runner crashed) → ``internal_error``.
The job has ``max_attempts = 1``, so it is never re-run; ``job_dead`` is sent inside the
transaction that buried the job, so the deployment fails in that same transaction. A waiting
job an operator cancelled in the jobs API or admin cancels its pending deployment.
"""

import logging

from django.db import transaction
from django.dispatch import receiver

from deployments import lifecycle
from deployments.creation import RUN_TASK
from deployments.models import Deployment, DeploymentStatus, FailureReason
from jobs.models import JobReason
from jobs.services import notify_staff
from jobs.signals import job_cancelled, job_dead

logger = logging.getLogger("deployments")
FAILURE_OF_DEAD_JOB = {
    JobReason.WORKER_LOST: FailureReason.WORKER_LOST,
    JobReason.LEASE_EXPIRED: FailureReason.WORKER_LOST,
    JobReason.TIME_LIMIT: FailureReason.TIMED_OUT,
}


@receiver(job_dead, dispatch_uid="deployments.fail_deployment_of_dead_job")
def fail_deployment_of_dead_job(sender, job, reason: JobReason, **kwargs) -> None:
    """Fail the deployment of a dead ``deployments.run`` job, if it had not ended."""
    if job.task != RUN_TASK:
        return
    deployment_id = (job.payload or {}).get("deployment_id")
    if deployment_id is None:
        return
    failure = FAILURE_OF_DEAD_JOB.get(reason, FailureReason.INTERNAL_ERROR)
    try:
        with transaction.atomic():  # a savepoint: a failure here must not undo the burial
            lifecycle.fail_lost(
                int(deployment_id), job_id=job.pk, reason=failure, error=job.last_error
            )
    except Exception as exc:  # a bug: the job stays dead, operators are told what is stuck
        logger.exception(
            "deployment.fail_on_dead_job_failed",
            extra={"deployment_id": deployment_id, "job_id": job.pk},
        )
        notify_staff(
            topic="deployment.fail_on_dead_job_failed",
            title=f"deployment {deployment_id} could not be failed after its job {job.pk} died",
            body=f"{type(exc).__name__}: {exc}"[:2000],
            data={"deployment_id": deployment_id, "job_id": job.pk},
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
