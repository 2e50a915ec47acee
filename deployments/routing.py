"""runs_on: a project's deployments run only on a live deployer host having all its tags.

Routing happens at claim time, under the environment lock, so the engine's claim stays the
one gate: a deployment's job is enqueued on ``deployments`` as always, and whichever deployer
claims it first decides (``route``):

* the project has no ``runs_on``, or this host has every tag: it runs here;
* another live host has them: the job moves to that host's own queue
  (``deployments.host.<host>``, deployments.deployers) and snoozes for a moment, so that host
  claims it next — without an attempt spent;
* no live host has them: the deployment says so (``waiting_for``, shown on its page and in
  the API, with ``waiting_since``) and its job snoozes ``CONVEYOR_DEPLOYMENT_WAIT`` before it
  looks again; once it has waited ``CONVEYOR_RUNS_ON_WAIT`` (10m) it fails ``no_deployer``.

A job waiting on a host's queue when that host is marked gone is moved back to
``deployments`` (``return_from_gone``), so it is decided again rather than left unseen.
"""

import logging
from dataclasses import dataclass
from enum import Enum

from django.db.models import Q
from django.utils import timezone

from deployments import conf, deployers, lifecycle
from deployments.events import log_deployment
from deployments.models import Deployment, DeploymentEvent, FailureReason
from jobs.models import PENDING, Job, JobStatus
from jobs.publish import publish_on_commit

logger = logging.getLogger("deployments.routing")
# A moved job snoozes this long, so its next doorbell goes to the host it moved to.
MOVE_DELAY_SECONDS = 0.2


class Route(Enum):
    HERE = "here"
    MOVED = "moved"
    WAIT = "wait"
    FAIL = "fail"


@dataclass(frozen=True)
class Routing:
    route: Route
    host: str = ""
    note: str = ""


def wanted_tags(deployment: Deployment) -> list[str]:
    raw = deployment.project.runs_on or []
    return sorted({str(tag).lower() for tag in ([raw] if isinstance(raw, str) else raw)})


def decide(deployment: Deployment, *, now=None) -> Routing:
    """Decide where ``deployment`` runs, as seen from this host."""
    tags = wanted_tags(deployment)
    options = conf.get()
    if not tags or set(tags) <= set(options.deployer_tags):
        return Routing(Route.HERE)
    # Not this host, even if its row still shows the tags (it restarted with others).
    candidates = [d for d in deployers.with_tags(tags) if d.host != options.deployer_host]
    if candidates:
        return Routing(Route.MOVED, host=candidates[0].host, note=_on(candidates[0].host))
    return unmatched(deployment, tags, now=now)


def unmatched(deployment: Deployment, tags: list[str], *, now=None) -> Routing:
    """WAIT, or FAIL once waited ``CONVEYOR_RUNS_ON_WAIT``: no live host has ``tags``."""
    now = now or timezone.now()
    since = deployment.waiting_since or now
    note = f"a live deployer host with tags {', '.join(tags)} (runs_on)"
    if now - since >= conf.get().runs_on_wait:
        return Routing(Route.FAIL, note=note)
    return Routing(Route.WAIT, note=note)


def fail_unmatched(deployment: Deployment, note: str, *, job_id: int | None = None):
    """End ``deployment`` ``failed/no_deployer``; the failed row, or None if it had ended."""
    failed = lifecycle.fail_lost(
        deployment.pk,
        reason=FailureReason.NO_DEPLOYER,
        error=f"waited {conf.get().runs_on_wait} for {note}; none is live",
        job_id=job_id,
    )
    stop_waiting(deployment)
    return failed


def _on(host: str) -> str:
    return f"deployer host {host} (runs_on), to which it was routed"


def move_job(job: Job, host: str) -> None:
    """Put the running ``job`` on ``host``'s queue; its snooze then rings there."""
    queue = deployers.host_queue(host)
    Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(queue=queue)
    job.queue = queue


def note_waiting(deployment: Deployment, note: str, *, now=None) -> None:
    """Record on the deployment, and its timeline, what it waits for (once per change)."""
    now = now or timezone.now()
    if deployment.waiting_for == note and deployment.waiting_since:
        return
    since = deployment.waiting_since or now
    Deployment.objects.filter(pk=deployment.pk).update(waiting_for=note, waiting_since=since)
    deployment.waiting_for, deployment.waiting_since = note, since
    DeploymentEvent.objects.create(
        deployment=deployment,
        kind=DeploymentEvent.WAITING_FOR_DEPLOYER,
        at=now,
        details={"waiting_for": note},
    )
    log_deployment("deployment.waiting_for_deployer", deployment, waiting_for=note)


def clear_waiting(deployment: Deployment) -> None:
    if deployment.waiting_for or deployment.waiting_since:
        Deployment.objects.filter(pk=deployment.pk).update(waiting_for="", waiting_since=None)
        deployment.waiting_for, deployment.waiting_since = "", None


def stop_waiting(deployment: Deployment) -> None:
    """Clear what an ended deployment waited for; ``waiting_since`` stays as a record."""
    Deployment.objects.filter(pk=deployment.pk).update(waiting_for="")
    deployment.waiting_for = ""


def return_from_gone(hosts: list[str]) -> int:
    """Move the waiting jobs of gone hosts' queues back to ``deployments``; ring for them."""
    if not hosts:
        return 0
    queues = [deployers.host_queue(host) for host in hosts]
    waiting = Job.objects.filter(
        Q(queue__in=queues), status__in=PENDING, task="deployments.run"
    ).values_list("pk", flat=True)
    ids = list(waiting[:1000])
    Job.objects.filter(pk__in=ids, status__in=PENDING).update(
        queue=deployers.DEPLOYMENTS_QUEUE, run_after=timezone.now()
    )
    publish_on_commit(list(Job.objects.filter(pk__in=ids, status__in=PENDING)))
    return len(ids)
