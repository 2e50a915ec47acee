"""Lease reaper: recover running jobs whose worker stopped renewing the lease.

A whole worker that dies (power loss, ``kill -9`` of the parent) fires no signal, and its
unacknowledged message only comes back after the broker's visibility timeout. The reaper
finds ``running`` jobs whose ``lease_expires_at`` has passed and moves each to ``retrying``
(re-published at once) while it has attempts left, else buries it as ``dead`` with
``last_error = "worker lost: lease expired"``. A live lease is never touched; the late
duplicate message, if it ever comes, loses the claim.

Runs every ``CONVEYOR_REAPER_INTERVAL`` (default 1m); leases last
``CONVEYOR_JOB_LEASE_TIMEOUT`` (default 5m). Logs one ``maintenance.reaper`` line.
"""

import logging
from dataclasses import dataclass

from django.db.models import F, Q
from django.utils import timezone

from jobs import services
from jobs.models import Job, JobStatus
from jobs.publish import publish
from jobs.transitions import transition

logger = logging.getLogger("jobs.maintenance")
ERROR = "worker lost: lease expired"
BATCH_SIZE = 1000


@dataclass(frozen=True)
class ReapResult:
    retried: int = 0
    dead: int = 0


def _first_batch(condition: Q) -> Q:
    ids = Job.objects.filter(condition).order_by("lease_expires_at").values_list("pk", flat=True)
    return Q(pk__in=list(ids[:BATCH_SIZE]))


def reap() -> ReapResult:
    """Re-queue or bury every running job whose lease has expired; return the counts."""
    retried = dead = 0
    while True:
        now = timezone.now()
        expired = Q(status=JobStatus.RUNNING, lease_expires_at__lt=now)
        batch = _first_batch(expired)
        moved = transition(
            batch & expired & Q(attempts__lt=F("max_attempts")),
            JobStatus.RETRYING,
            from_=[JobStatus.RUNNING],
            run_after=now,
            last_error=ERROR,
            lease_expires_at=None,
            locked_by="",
            published_at=now,
        )
        for job in moved:
            services.log_job("job.reaped", job, outcome="retrying")
        publish(moved)
        buried = services.job_bury(batch & expired, error=ERROR)
        retried, dead = retried + len(moved), dead + len(buried)
        if len(moved) + len(buried) < BATCH_SIZE:
            break
    result = ReapResult(retried=retried, dead=dead)
    logger.info("maintenance.reaper", extra={"retried": retried, "dead": dead})
    return result
