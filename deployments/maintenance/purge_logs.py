"""Log purge: delete the log chunks of deployments finished longer ago than the retention.

Deployments themselves (status, step runs, lineage) are kept; only their ``LogChunk`` rows
go. The finished deployments that still have chunks are walked oldest ``finished_at`` first
on its index, ``DEPLOYMENTS_PER_ROUND`` at a time (each round continues after the last one,
so a round never re-reads the deployments already emptied), and their chunks are deleted
``BATCH_SIZE`` rows per statement on the ``(deployment, sequence)`` index with a short pause
between statements (``project.batch_delete``). A purged deployment's log reads as empty and
complete.

Runs with the job purge every ``CONVEYOR_PURGE_INTERVAL`` (default 1h); retention is
``CONVEYOR_LOG_RETENTION`` (default 90d). Logs one ``maintenance.log_purge`` line.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from deployments import conf
from deployments.models import Deployment, LogChunk
from project.batch_delete import BATCH_SIZE, delete_in_batches

logger = logging.getLogger("deployments.maintenance")
DEPLOYMENTS_PER_ROUND = 100


@dataclass(frozen=True)
class LogPurgeResult:
    deployments: int = 0
    chunks: int = 0


def purge_logs(now: datetime | None = None) -> LogPurgeResult:
    """Delete log chunks of deployments finished before the retention cutoff."""
    cutoff = (now or timezone.now()) - conf.get().log_retention
    deployments = chunks = 0
    after = Q()
    while True:
        rows = list(
            Deployment.objects.filter(finished_at__lt=cutoff)
            .filter(after)
            .filter(Exists(LogChunk.objects.filter(deployment=OuterRef("pk"))))
            .order_by("finished_at", "id")
            .values_list("pk", "finished_at")[:DEPLOYMENTS_PER_ROUND]
        )
        if rows:
            chunks += delete_in_batches(
                LogChunk.objects.filter(deployment_id__in=[pk for pk, _ in rows]),
                order_by="deployment_id",
                batch_size=BATCH_SIZE,
            )
            last_pk, last_finished = rows[-1]
            after = Q(finished_at__gt=last_finished) | Q(finished_at=last_finished, pk__gt=last_pk)
        deployments += len(rows)
        if len(rows) < DEPLOYMENTS_PER_ROUND:
            break
    result = LogPurgeResult(deployments=deployments, chunks=chunks)
    logger.info("maintenance.log_purge", extra=vars(result))
    return result
