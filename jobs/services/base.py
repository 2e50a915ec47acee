"""Shared pieces of the job services: the structured log line and the run fence."""

import logging

from django.db.models import Q

from jobs.models import Job, JobStatus

logger = logging.getLogger("jobs")
S = JobStatus
MAX_ERROR_LENGTH = 4000


def log_job(event: str, job: Job, **fields: object) -> None:
    """Log one structured line about ``job``."""
    logger.info(
        event,
        extra={
            "job_id": job.pk,
            "task": job.task,
            "queue": job.queue,
            "attempt": job.attempts,
            **fields,
        },
    )


def this_run(job: Job) -> Q:
    """Match ``job`` only while it is still the same run (its attempt is the fencing token)."""
    return Q(pk=job.pk, attempts=job.attempts, locked_by=job.locked_by)
