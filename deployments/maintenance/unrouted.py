"""Unrouted deployments: a ``runs_on`` no live deployer host matches, while no deployer claims.

Where a deployment runs is decided when a deployer claims its job (deployments.routing): it
runs there, moves to a host with the tags, or waits saying so and fails ``no_deployer`` after
``CONVEYOR_RUNS_ON_WAIT``. That needs a deployer to claim. With none running at all (every
deployer host stopped, or none ever started), nothing would decide, and the deployment would
sit ``pending`` in silence. This runner, every ``CONVEYOR_UNROUTED_CHECK_INTERVAL`` (1m) from
beat on any worker, decides for those: a pending deployment of a project with ``runs_on``,
created at least one ``CONVEYOR_DEPLOYMENT_WAIT`` ago, for which no live deployer host has the
tags, says what it waits for (``waiting_for``, ``waiting_since``, a timeline entry) and, once
it has waited ``CONVEYOR_RUNS_ON_WAIT``, fails ``no_deployer`` and its job is cancelled. Each
is decided under its environment lock, as a claim is. At most 200 per run.
"""

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from deployments import conf, deployers, routing
from deployments.locks import lock_environment
from deployments.models import Deployment, DeploymentStatus
from jobs.services import job_cancel

logger = logging.getLogger("deployments.maintenance")
BATCH = 200
ACTOR = "conveyor:unrouted"


@dataclass
class UnroutedResult:
    waiting: int = 0
    failed: int = 0


def check_unrouted() -> UnroutedResult:
    """Note or fail the pending deployments no live deployer can take; log one summary line."""
    result = UnroutedResult()
    options = conf.get()
    now = timezone.now()
    pending = (
        Deployment.objects.select_related("project")
        .filter(status=DeploymentStatus.PENDING, created_at__lte=now - options.wait)
        .exclude(project__runs_on=[])
        .order_by("pk")[:BATCH]
    )
    live = [set(deployer.tags) for deployer in deployers.live()]  # read once per run
    for deployment in pending:
        tags = routing.wanted_tags(deployment)
        if not tags or any(set(tags) <= host_tags for host_tags in live):
            continue  # a live deployer will decide when it claims
        outcome = _decide(deployment.pk, tags, now=now)
        if outcome == "failed":
            result.failed += 1
        elif outcome == "waiting":
            result.waiting += 1
    logger.info("maintenance.check_unrouted", extra=vars(result))
    return result


def _decide(deployment_id: int, tags: list[str], *, now) -> str:
    with transaction.atomic():
        deployment = Deployment.objects.select_related("project").get(pk=deployment_id)
        lock_environment(deployment.project_id, deployment.environment)
        deployment.refresh_from_db()
        if deployment.status != DeploymentStatus.PENDING:
            return ""
        verdict = routing.unmatched(deployment, tags, now=now)
        if verdict.route is routing.Route.WAIT:
            routing.note_waiting(deployment, verdict.note, now=now)
            return "waiting"
        job_id = deployment.job_id
        if routing.fail_unmatched(deployment, verdict.note) is None:
            return ""
        if job_id is not None:
            job_cancel(job_id, actor=ACTOR)
        return "failed"
