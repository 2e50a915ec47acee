"""Runs lost with their worker process: Celery's ``task_failure`` signal, for JobTask tasks.

A job body's own exceptions never reach Celery (JobTask hands them to jobs.outcome). What
does is a pool child that died under a message (``kill -9``, the OOM killer) or went past
its hard time limit: Celery reports ``WorkerLostError`` / ``TimeLimitExceeded`` from the
worker's parent process, and has already acknowledged the message, so the broker will never
deliver it again. Here every job of that message is recovered at once: the one the child was
running goes through jobs.outcome (retrying, or dead once its attempts are spent; the attempt
was counted at claim), and the ones of a batch it had not reached yet are published again.
"""

import logging

from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery import signals
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from jobs import outcome
from jobs.models import PENDING, Job, JobStatus
from jobs.publish import publish
from jobs.task import JobTask

logger = logging.getLogger("jobs")
_node = {"name": ""}


@signals.celeryd_init.connect
def _remember_node_name(sender=None, **kwargs) -> None:
    """Keep this worker's node name: it prefixes ``locked_by`` for every run it claims."""
    _node["name"] = str(sender or "")


@signals.task_failure.connect
def on_task_failure(sender=None, task_id=None, exception=None, args=None, **kwargs) -> None:
    """Recover the jobs of a message whose pool child was lost or hit its hard time limit."""
    if not isinstance(sender, JobTask) or not args:
        return
    if isinstance(exception, TimeLimitExceeded):
        kind = outcome.Happened.TIME_LIMIT
    elif isinstance(exception, WorkerLostError):
        kind = outcome.Happened.WORKER_LOST
    else:  # raised outside a body (a claim that failed): the sweeper re-sends the job
        logger.warning(
            "job.task_error", extra={"task": sender.name, "error": repr(exception)[:300]}
        )
        return
    close_old_connections()
    ids = args[0] if isinstance(args[0], list) else [args[0]]
    recover_message(sender, [int(i) for i in ids], kind=kind, exc=exception)


def recover_message(task: JobTask, job_ids: list[int], *, kind, exc=None) -> None:
    """End the run this worker held among ``job_ids``; publish the unclaimed ones again."""
    node = _node["name"] or getattr(task.request, "hostname", "") or ""
    running = Job.objects.filter(
        pk__in=job_ids, status=JobStatus.RUNNING, locked_by__startswith=f"{node}/"
    )
    message = f"{exc.__class__.__name__}: {exc}" if exc is not None else kind.value
    for job in running:
        decision = outcome.decide(outcome.Event.lost(kind, message, exc), job, task)
        outcome.apply(decision, job, where=Q(status=JobStatus.RUNNING))
    due = Q(pk__in=job_ids, status__in=PENDING, run_after__lte=timezone.now())
    waiting = list(Job.objects.filter(due))
    if waiting:
        publish(waiting)
