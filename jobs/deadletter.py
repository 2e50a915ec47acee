"""Runs lost with their worker process: Celery's ``task_failure`` signal, for JobTask tasks.

A job body's own exceptions never reach Celery (JobTask hands them to jobs.outcome). What does
is a pool child that died under a message (``kill -9``, the OOM killer) or went past its hard
time limit: Celery reports ``WorkerLostError`` / ``TimeLimitExceeded`` from the worker's parent
process, and has already acknowledged the message, so the broker will never deliver it again.
Here every job of that message is recovered at once: the one the child was running is decided
by jobs.outcome and written by jobs.completer (retrying, or dead once its attempts are spent;
the attempt was counted at claim), and the ones of a batch it had not reached yet are published
again. The same happens for an error raised outside a body in the process itself (a claim or a
completion whose statement failed): the run it held ends with that error.
"""

import logging

from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery import signals
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from jobs import completer, outcome
from jobs.models import PENDING, Job, JobStatus
from jobs.publish import publish
from jobs.task import JobTask, worker_id

logger = logging.getLogger("jobs")
_node = {"name": ""}


@signals.celeryd_init.connect
def _remember_node_name(sender=None, **kwargs) -> None:
    """Keep this worker's node name: it prefixes ``locked_by`` for every run it claims."""
    _node["name"] = str(sender or "")


@signals.task_failure.connect
def on_task_failure(sender=None, task_id=None, exception=None, args=None, **kwargs) -> None:
    """Recover the jobs of a message that failed outside its bodies (see the module doc)."""
    if not isinstance(sender, JobTask) or not args:
        return
    close_old_connections()
    ids = _ids(args[0])
    if isinstance(exception, TimeLimitExceeded | WorkerLostError):  # in the worker's parent
        kind = (
            outcome.Happened.TIME_LIMIT
            if isinstance(exception, TimeLimitExceeded)
            else outcome.Happened.WORKER_LOST
        )
        node = _node["name"] or getattr(sender.request, "hostname", "") or ""
        event = outcome.Event.lost(kind, f"{type(exception).__name__}: {exception}", exception)
        recover_message(sender, ids, event, Q(locked_by__startswith=f"{node}/"))
        return
    # Raised in this process outside a body (a claim or a completion that failed): end the
    # run this process held with that error, and send the rest of the message again.
    logger.warning("job.task_error", extra={"task": sender.name, "error": repr(exception)[:300]})
    recover_message(sender, ids, outcome.Event.raised(exception), Q(locked_by=worker_id(sender)))


def _ids(value) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**63]


def recover_message(task: JobTask, job_ids: list[int], event, held_here: Q) -> None:
    """End the run this worker held among ``job_ids``; publish the unclaimed ones again."""
    running = Job.objects.filter(held_here, pk__in=job_ids, status=JobStatus.RUNNING)
    for job in running:
        completer.finish(outcome.decide(event, job, task), job)
    due = Q(pk__in=job_ids, status__in=PENDING, run_after__lte=timezone.now())
    waiting = list(Job.objects.filter(due))
    if waiting:
        publish(waiting)
