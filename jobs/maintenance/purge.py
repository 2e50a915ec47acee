"""Purge: delete finished jobs past their retention, in bounded batches.

``succeeded`` and ``cancelled`` jobs older than ``CONVEYOR_PURGE_COMPLETED_RETENTION``
(default 7d) and ``dead`` jobs older than ``CONVEYOR_PURGE_DEAD_RETENTION`` (default 30d) are
deleted one status at a time, oldest ``finished_at`` first on the ``(status, finished_at)``
index, up to 1,000 rows per statement (fewer while statements run slow) with a short pause
between statements, each batch starting where the last one ended, until a batch comes back
short (``project.batch_delete``: one ``DELETE … WHERE <filter> AND id IN (SELECT …
ORDER BY finished_at LIMIT 1000)`` per batch; a job being retried meanwhile is kept;
rows pointing at a deleted job are handled in the same statement, as their foreign key's
``on_delete`` says, e.g. a webhook delivery's link to its job is set to NULL, a workflow's
edges to it deleted).
django-celery-results rows past ``CELERY_RESULT_EXPIRES`` go too, the same way on their date
index, the state rows of task limit keys that have not started a job for a day
(jobs.limits), and workflows older than the completed retention none of whose jobs is left
(their edges went with their jobs). A workflow is purged whole: one that has not ended keeps
its finished jobs, however old (its callbacks get their outcomes), and one with a dead job
keeps its succeeded and cancelled ones until that job goes (a retry of it resumes the
workflow): jobs.workflows.state. API idempotency keys have a purge of their own
(project.access.purge).

Runs every ``CONVEYOR_PURGE_INTERVAL`` (default 1h). Logs one ``maintenance.purge`` line.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django_celery_results.models import TaskResult

from jobs import conf
from jobs.models import Job, JobStatus, LimitKeyState, Workflow
from jobs.workflows.state import outside_running_workflows, outside_workflows_kept_whole
from project.batch_delete import BATCH_SIZE, delete_in_batches

logger = logging.getLogger("jobs.maintenance")
LIMIT_KEY_RETENTION = timedelta(days=1)


@dataclass(frozen=True)
class PurgeResult:
    completed: int = 0
    dead: int = 0
    task_results: int = 0
    limit_keys: int = 0
    workflows: int = 0


def purge(batch_size: int = BATCH_SIZE) -> PurgeResult:
    """Delete finished jobs and task results past their retention; return the counts."""
    now = timezone.now()
    options = conf.get()
    # Dead jobs first: a workflow whose last dead job goes now has its other jobs go too.
    dead = _purge_jobs(JobStatus.DEAD, now - options.dead_retention, batch_size)
    completed = sum(
        _purge_jobs(status, now - options.completed_retention, batch_size)
        for status in (JobStatus.SUCCEEDED, JobStatus.CANCELLED)
    )
    results = delete_in_batches(
        TaskResult.objects.filter(date_done__lt=now - settings.CELERY_RESULT_EXPIRES),
        order_by="date_done",
        batch_size=batch_size,
    )
    # A key idle this long has no start left in any rate window (the longest is an hour).
    limit_keys = delete_in_batches(
        LimitKeyState.objects.filter(last_started_at__lt=now - LIMIT_KEY_RETENTION),
        order_by="last_started_at",
        batch_size=batch_size,
    )
    workflows = delete_in_batches(
        Workflow.objects.filter(created_at__lt=now - options.completed_retention).exclude(
            Exists(Job.objects.filter(workflow=OuterRef("pk")))
        ),
        order_by="created_at",
        batch_size=batch_size,
    )
    result = PurgeResult(
        completed=completed,
        dead=dead,
        task_results=results,
        limit_keys=limit_keys,
        workflows=workflows,
    )
    logger.info("maintenance.purge", extra=vars(result))
    return result


def _purge_jobs(status: str, cutoff, batch_size: int) -> int:
    """Delete the jobs of one final ``status`` finished before ``cutoff``, oldest first, but
    those of a workflow still running or, but for dead ones, with a dead job."""
    kept = outside_running_workflows if status == JobStatus.DEAD else outside_workflows_kept_whole
    return delete_in_batches(
        Job.objects.filter(status=status, finished_at__lt=cutoff),
        order_by="finished_at",
        batch_size=batch_size,
        choose=kept(),
    )
