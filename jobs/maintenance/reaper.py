"""Lease reaper: recover running jobs whose worker stopped renewing the lease.

A whole worker that dies (power loss, ``kill -9`` of the parent) fires no signal, and its
unacknowledged message only comes back after the broker's visibility timeout. The reaper finds
``running`` jobs whose ``lease_expires_at`` has passed, has jobs.outcome decide each as
``lease_expired`` and jobs.completer write it: retrying (after the task's backoff) while it has
attempts left, else ``dead`` with reason ``lease_expired``; a job whose cancel was requested
ends ``cancelled`` and never runs again. A live lease is never touched (the guard re-checks it
in the UPDATE); the late duplicate message, if it ever comes, loses the claim.

Runs every ``CONVEYOR_REAPER_INTERVAL`` (default 1m); leases last
``CONVEYOR_JOB_LEASE_TIMEOUT`` (default 5m). Logs one ``maintenance.reaper`` line.
"""

import logging
from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone

from jobs import completer, outcome
from jobs.models import Job, JobStatus

logger = logging.getLogger("jobs.maintenance")
MESSAGE = "lease expired: the worker stopped renewing it"
BATCH_SIZE = 1000


@dataclass(frozen=True)
class ReapResult:
    retried: int = 0
    dead: int = 0
    cancelled: int = 0


def reap() -> ReapResult:
    """Re-queue, bury or cancel every running job whose lease has expired; return the counts."""
    counts = {JobStatus.RETRYING: 0, JobStatus.DEAD: 0, JobStatus.CANCELLED: 0}
    event = outcome.Event.lost(outcome.Happened.LEASE_EXPIRED, MESSAGE)
    while True:
        now = timezone.now()
        expired = Q(status=JobStatus.RUNNING, lease_expires_at__lt=now)
        batch = list(Job.objects.filter(expired).order_by("lease_expires_at")[:BATCH_SIZE])
        for job in batch:
            decision = outcome.decide(event, job, now=now)
            done = completer.finish(decision, job, lease_expired_before=now)
            if done is not None:
                counts[done.status] += 1
        if len(batch) < BATCH_SIZE:
            break
    result = ReapResult(
        retried=counts[JobStatus.RETRYING],
        dead=counts[JobStatus.DEAD],
        cancelled=counts[JobStatus.CANCELLED],
    )
    logger.info("maintenance.reaper", extra=vars(result))
    return result
