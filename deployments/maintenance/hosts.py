"""Host rounds: the beat-scheduled fetch and prune runners fan out one job per live host.

Workspaces are on each deployer host's own disk, so a fetch or prune round must run there.
The runner that beat starts (on the ``maintenance`` queue, anywhere) first marks gone the
deployer hosts not seen for ``CONVEYOR_DEPLOYER_GONE_AFTER`` (deployments.deployers), then
enqueues one job per live host on that host's own queue ``deployments.host.<host>``, which
only that host's deployer workers consume; the job there runs the round over that host's
rows only. A host's job is unique while queued or running, so a host that is slow or
stopped never piles up rounds; one that comes back runs the one waiting for it.

Logs one ``maintenance.host_rounds`` line per fan-out.
"""

import logging
from dataclasses import dataclass

from django.db import transaction

from deployments import deployers
from jobs.models import JobStatus
from jobs.services import enqueue
from jobs.unique import Unique

logger = logging.getLogger("deployments.maintenance")

# One waiting or running round per (task, host): the engine moves a job among these itself.
ONE_ROUND_PER_HOST = Unique(
    keys=("host",), states=frozenset({JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RETRYING})
)


@dataclass(frozen=True)
class FanOutResult:
    hosts: int = 0
    enqueued: int = 0
    already_waiting: int = 0
    marked_gone: int = 0


def fan_out(task: str) -> FanOutResult:
    """Mark gone hosts, then enqueue ``task`` once for each live host on its own queue."""
    gone = deployers.mark_gone()
    hosts = [deployer.host for deployer in deployers.live()]
    enqueued = waiting = 0
    with transaction.atomic():
        for host in hosts:
            job = enqueue(
                task, {"host": host}, queue=deployers.host_queue(host), unique=ONE_ROUND_PER_HOST
            )
            if job.unique_conflict:
                waiting += 1
            else:
                enqueued += 1
    result = FanOutResult(
        hosts=len(hosts), enqueued=enqueued, already_waiting=waiting, marked_gone=gone
    )
    logger.info("maintenance.host_rounds", extra={"task": task, **vars(result)})
    return result
