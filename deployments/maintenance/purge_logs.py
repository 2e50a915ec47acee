"""Log purge: delete the log chunks of deployments finished longer ago than the retention.

Deployments themselves (status, step runs, lineage) are kept; only their ``LogChunk`` rows
go, at most ``BATCH_SIZE`` rows per statement, until a batch comes back short. A purged
deployment's log reads as empty and complete.

Runs with the job purge every ``CONVEYOR_PURGE_INTERVAL`` (default 1h); retention is
``CONVEYOR_LOG_RETENTION`` (default 90d). Logs one ``maintenance.log_purge`` line.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef
from django.utils import timezone

from deployments import conf
from deployments.models import Deployment, LogChunk
from jobs.maintenance.purge import delete_in_batches

logger = logging.getLogger("deployments.maintenance")
BATCH_SIZE = 1000
DEPLOYMENTS_PER_ROUND = 100


@dataclass(frozen=True)
class LogPurgeResult:
    deployments: int = 0
    chunks: int = 0


def purge_logs(now: datetime | None = None) -> LogPurgeResult:
    """Delete log chunks of deployments finished before the retention cutoff."""
    cutoff = (now or timezone.now()) - conf.get().log_retention
    deployments = chunks = 0
    while True:
        ids = list(
            Deployment.objects.filter(finished_at__lt=cutoff)
            .filter(Exists(LogChunk.objects.filter(deployment=OuterRef("pk"))))
            .values_list("pk", flat=True)[:DEPLOYMENTS_PER_ROUND]
        )
        for deployment_id in ids:
            chunks += delete_in_batches(
                LogChunk.objects.filter(deployment_id=deployment_id), BATCH_SIZE
            )
        deployments += len(ids)
        if len(ids) < DEPLOYMENTS_PER_ROUND:
            break
    result = LogPurgeResult(deployments=deployments, chunks=chunks)
    logger.info("maintenance.log_purge", extra=vars(result))
    return result
