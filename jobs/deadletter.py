"""The dead-letter path: Celery's ``task_failure`` signal, handled for JobTask tasks.

``task_failure`` fires in two places, and both end here:

* in the pool child, when a body raised ``Permanent``, an error its task does not retry, or
  a retryable error after the job's attempts were spent: the job is buried (``dead``);
* in the worker's parent process, when the child died under the job (``kill -9``, the OOM
  killer, a hard time limit: ``WorkerLostError`` / ``TimeLimitExceeded``). Celery has already
  acknowledged the message, so the broker will never deliver it again. The attempt was
  counted at claim time, so the job goes back to ``retrying`` and is re-published, or is
  buried once its attempts are spent: a poison job that kills its worker ends ``dead``.
"""

import logging
import random

from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery import signals
from django.db import close_old_connections
from django.db.models import Q

from jobs import services
from jobs.models import Job, JobStatus
from jobs.publish import publish
from jobs.task import JobTask

logger = logging.getLogger("jobs")
LOST_WORKER_ERRORS = (WorkerLostError, TimeLimitExceeded)
_node = {"name": ""}


@signals.celeryd_init.connect
def _remember_node_name(sender=None, **kwargs) -> None:
    """Keep this worker's node name: it prefixes ``locked_by`` for every run it claims."""
    _node["name"] = str(sender or "")


@signals.task_failure.connect
def on_task_failure(sender=None, task_id=None, exception=None, args=None, **kwargs) -> None:
    """Bury a failed job, or re-queue it when its worker process was lost under it."""
    if not isinstance(sender, JobTask) or not args:
        return
    close_old_connections()
    job_id = int(args[0])
    ctx = getattr(sender.request, "job_context", None)
    if ctx is not None and ctx.job.pk == job_id:  # in the pool child: exactly this run
        this_worker = Q(
            pk=job_id,
            status=JobStatus.RUNNING,
            attempts=ctx.job.attempts,
            locked_by=ctx.job.locked_by,
        )
    else:  # in the parent: whichever run of this job a child of this worker held
        node = _node["name"] or getattr(sender.request, "hostname", "") or ""
        this_worker = Q(pk=job_id, status=JobStatus.RUNNING, locked_by__startswith=f"{node}/")
    error = f"{exception.__class__.__name__}: {exception}"
    if isinstance(exception, LOST_WORKER_ERRORS):
        _on_lost_worker(sender, this_worker, error=f"worker lost: {error}")
    else:
        services.job_bury(this_worker, error=error)


def _on_lost_worker(task: JobTask, this_worker: Q, *, error: str) -> None:
    job = Job.objects.filter(this_worker).first()
    if job is None:
        return
    if job.attempts >= job.max_attempts:
        services.job_bury(Q(pk=job.pk, attempts=job.attempts), error=error)
        return
    delay = random.uniform(
        0, min(task.retry_backoff * 2 ** max(0, job.attempts - 1), task.retry_backoff_max)
    )
    moved = services.job_retry_later(job, error=error, delay=delay)
    if moved is not None:
        publish([moved])
