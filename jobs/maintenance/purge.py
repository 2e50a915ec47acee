"""Purge: delete finished jobs past their retention, in bounded batches.

``succeeded`` and ``cancelled`` jobs older than ``CONVEYOR_PURGE_COMPLETED_RETENTION``
(default 7d) and ``dead`` jobs older than ``CONVEYOR_PURGE_DEAD_RETENTION`` (default 30d) are
deleted at most 1,000 rows per statement, until a batch comes back short; the filter runs on
the ``(status, finished_at)`` index. django-celery-results rows past
``CELERY_RESULT_EXPIRES`` and API idempotency keys older than 24 hours go too.

Runs every ``CONVEYOR_PURGE_INTERVAL`` (default 1h). Logs one ``maintenance.purge`` line.
"""

import logging
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone
from django_celery_results.models import TaskResult

from jobs import conf
from jobs.idempotency import KEY_RETENTION
from jobs.models import IdempotencyKey, Job, JobStatus

logger = logging.getLogger("jobs.maintenance")
BATCH_SIZE = 1000


@dataclass(frozen=True)
class PurgeResult:
    completed: int = 0
    dead: int = 0
    task_results: int = 0
    idempotency_keys: int = 0


def delete_in_batches(queryset, batch_size: int = BATCH_SIZE) -> int:
    """Delete the rows of ``queryset`` ``batch_size`` at a time; return how many went.

    Each DELETE applies the queryset's filter again, so a row that stopped matching between
    the two statements (a job retried meanwhile) is kept. Rows deleted by cascade are not
    counted.
    """
    deleted = 0
    label = queryset.model._meta.label
    while True:
        ids = list(queryset.values_list("pk", flat=True)[:batch_size])
        if ids:
            deleted += queryset.filter(pk__in=ids).delete()[1].get(label, 0)
        if len(ids) < batch_size:
            return deleted


def purge(batch_size: int = BATCH_SIZE) -> PurgeResult:
    """Delete finished jobs and task results past their retention; return the counts."""
    now = timezone.now()
    options = conf.get()
    completed = delete_in_batches(
        Job.objects.filter(
            status__in=[JobStatus.SUCCEEDED, JobStatus.CANCELLED],
            finished_at__lt=now - options.completed_retention,
        ),
        batch_size,
    )
    dead = delete_in_batches(
        Job.objects.filter(status=JobStatus.DEAD, finished_at__lt=now - options.dead_retention),
        batch_size,
    )
    results = delete_in_batches(
        TaskResult.objects.filter(date_done__lt=now - settings.CELERY_RESULT_EXPIRES), batch_size
    )
    keys = delete_in_batches(
        IdempotencyKey.objects.filter(created_at__lt=now - KEY_RETENTION), batch_size
    )
    result = PurgeResult(
        completed=completed, dead=dead, task_results=results, idempotency_keys=keys
    )
    logger.info("maintenance.purge", extra=vars(result))
    return result
