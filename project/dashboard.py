"""What the operator's dashboard shows: queues, throughput, workers, deployer hosts,
deployments in flight and waiting for approval.

Every figure is read from the database (and the broker's own queue lengths) when the page is
drawn, so every web process shows the same numbers; each comes with the admin list it counts.
No figure counts the job table: live counts come from the engine's accounting, the charts
and dead-in-24-hours from its per-minute rollup (``jobs.accounting``).
"""

import logging
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django.db.models import Count
from django.urls import reverse
from django.utils import timezone

from deployments import conf as deployments_conf
from deployments.approval_status import waiting_for_approval
from deployments.models import (
    ACTIVE,
    Deployer,
    Deployment,
    DeploymentStatus,
    StepRun,
    StepStatus,
    Workspace,
    Worktree,
)
from jobs import limits, publish, task_states, worker_registry
from jobs.accounting import counts, queues, stats, tallies
from jobs.accounting.rollup import OWNER_FAILED
from jobs.models import Job, JobStatus, WorkerHeartbeat
from jobs.queues import paused_names
from project.celery import app

logger = logging.getLogger(__name__)
# Chart ranges: name -> (span, bucket size).
RANGES = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "24h": (timedelta(hours=24), timedelta(hours=1)),
}


def _jobs_url(**filters) -> str:
    return reverse("admin:jobs_job_changelist") + "?" + urlencode(filters)


@dataclass(frozen=True)
class BrokerDepths:
    """Each queue's message count as the broker reports it, or why it could not be read."""

    depths: dict[str, int]
    unavailable: dict[str, str]  # queue -> the broker's error, for each queue without a depth


def broker_depths(queues) -> BrokerDepths:
    """Ask the broker for each queue's message count.

    A broker that is away or refuses (the transport's own errors, as jobs.publish lists them)
    makes the depth unavailable, with why, and is logged; any other error is a bug and
    propagates.
    """
    broker_errors = publish.broker_errors(app)
    depths: dict[str, int] = {}
    unavailable: dict[str, str] = {}
    try:
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            channel = conn.default_channel
            for name in queues:
                try:
                    size = getattr(channel, "_size", None)  # kombu's virtual transports
                    if size is not None:
                        depths[name] = int(size(name))
                    else:
                        depths[name] = channel.queue_declare(name, passive=True).message_count
                except broker_errors as exc:  # e.g. AMQP's NOT_FOUND for a queue not declared
                    unavailable[name] = _why(exc)
                    logger.warning(
                        "dashboard.broker_depth_failed", extra={"queue": name, "error": repr(exc)}
                    )
    except broker_errors as exc:
        logger.warning("dashboard.broker_failed", extra={"error": repr(exc)})
        why = _why(exc)
        unavailable.update((name, why) for name in queues if name not in depths)
    return BrokerDepths(depths=depths, unavailable=unavailable)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def queue_rows(now=None) -> list[dict]:
    """Per queue: queued, running, retrying, dead letters, oldest queued age, broker depth.

    Live counts and dead letters (dead jobs not retried and not superseded by a replay or a
    retry of their owner) are exact, from the engine's accounting and tallies; the oldest
    age is one index lookup per queue.
    """
    now = now or timezone.now()
    found = counts.read()
    names = queues.queue_names(found)
    per_queue = counts.by(found, "queue")
    dead = tallies.dead_letters_by_queue()
    oldest = queues.oldest_queued(names, now=now)
    broker = broker_depths(names)
    paused = paused_names()
    rows = []
    for name in names:
        live = per_queue.get(name, {})
        age = (now - oldest[name]).total_seconds() if name in oldest else None
        rows.append(
            {
                "queue": name,
                "paused": name in paused,
                "queued": live.get(JobStatus.QUEUED, 0),
                "queued_url": _jobs_url(queue=name, status__exact=JobStatus.QUEUED),
                "running": live.get(JobStatus.RUNNING, 0),
                "running_url": _jobs_url(queue=name, status__exact=JobStatus.RUNNING),
                "retrying": live.get(JobStatus.RETRYING, 0),
                "retrying_url": _jobs_url(queue=name, status__exact=JobStatus.RETRYING),
                "dead_letters": dead.get(name, 0),
                "dead_letters_url": _jobs_url(queue=name, dead_letter="yes"),
                "oldest_age": age,
                "oldest_url": _jobs_url(queue=name, status__exact=JobStatus.QUEUED),
                "broker_depth": broker.depths.get(name),
                "broker_depth_unavailable": broker.unavailable.get(name, ""),
            }
        )
    return rows


def throughput(range_name: str = "1h", now=None) -> dict:
    """Jobs that ended per bucket: succeeded, and failed (ended dead, or succeeded for an
    owner that failed, as a failed deployment's job does), from the minute rollup.

    An estimate (see jobs.accounting.rollup); a job counts once, in the minute it ended.
    """
    span, step = RANGES[range_name]
    now = now or timezone.now()
    first = now - span
    buckets = []
    t = now.replace(second=0, microsecond=0)
    hourly = step >= timedelta(hours=1)
    if hourly:
        t = t.replace(minute=0)
    while t > first - step and len(buckets) < 200:
        buckets.append(t)
        t -= step
    buckets.reverse()
    ended = stats.ended_per_bucket(buckets[0], hourly=hourly)
    return {
        "range": range_name,
        "step_seconds": int(step.total_seconds()),
        "points": [
            {
                "at": b,
                "succeeded": ended.get((b, JobStatus.SUCCEEDED), 0),
                "failed": ended.get((b, JobStatus.DEAD), 0) + ended.get((b, OWNER_FAILED), 0),
            }
            for b in buckets
        ],
    }


def worker_rows(now=None) -> list[dict]:
    """Every worker with a heartbeat row: alive or gone, its queues, pool and running jobs."""
    now = now or timezone.now()
    cutoff = worker_registry.gone_before(now)
    running = list(
        Job.objects.filter(status=JobStatus.RUNNING).values_list("pk", "task", "locked_by")
    )
    rows = []
    for worker in WorkerHeartbeat.objects.all():
        prefix = worker.name + "/"
        jobs = [(pk, task) for pk, task, by in running if by.startswith(prefix)]
        gone = worker.stopped_at is not None or worker.last_seen_at < cutoff
        rows.append(
            {
                "worker": worker,
                "alive": not gone,
                "state": "stopped" if worker.stopped_at else ("gone" if gone else "alive"),
                "seen_ago": (now - worker.last_seen_at).total_seconds(),
                "jobs": [
                    {
                        "id": pk,
                        "task": task,
                        "url": reverse("admin:jobs_job_change", args=[pk]),
                    }
                    for pk, task in jobs
                ],
                "running_url": _jobs_url(
                    status__exact=JobStatus.RUNNING, locked_by__startswith=prefix
                ),
            }
        )
    rows.sort(key=lambda r: (not r["alive"], r["worker"].name))
    return rows


def deployer_rows(now=None) -> list[dict]:
    """Every deployer host: live or gone, its tags, free disk, workspaces and worktrees."""
    now = now or timezone.now()
    cutoff = now - deployments_conf.get().deployer_gone_after
    spaces = dict(
        Workspace.objects.order_by()
        .values_list("host")
        .annotate(n=Count("pk"))
        .values_list("host", "n")
    )
    trees = dict(
        Worktree.objects.order_by()
        .values_list("workspace__host")
        .annotate(n=Count("pk"))
        .values_list("workspace__host", "n")
    )
    rows = []
    for deployer in Deployer.objects.order_by("host")[:200]:
        gone = deployer.gone_at is not None or deployer.last_seen_at < cutoff
        rows.append(
            {
                "deployer": deployer,
                "alive": not gone,
                "state": "gone" if gone else "alive",
                "seen_ago": (now - deployer.last_seen_at).total_seconds(),
                "workspaces": spaces.get(deployer.host, 0),
                "worktrees": trees.get(deployer.host, 0),
                "workspaces_url": reverse("admin:deployments_workspace_changelist")
                + "?"
                + urlencode({"host": deployer.host}),
            }
        )
    rows.sort(key=lambda r: (not r["alive"], r["deployer"].host))
    return rows


def deployments_in_flight(now=None) -> list[dict]:
    """Running, cancelling and pending deployments with their current step and elapsed time."""
    now = now or timezone.now()
    found = list(
        Deployment.objects.select_related("project")
        .filter(status__in=[*ACTIVE, DeploymentStatus.PENDING])
        .order_by("status", "pk")[:50]
    )
    current = {
        run.deployment_id: run
        for run in StepRun.objects.filter(deployment__in=found, status=StepStatus.RUNNING).order_by(
            "position"
        )
    }
    return [
        {
            "deployment": d,
            "url": reverse("admin:deployments_deployment_change", args=[d.pk]),
            "step": current.get(d.pk),
            "elapsed": (now - (d.started_at or d.created_at)).total_seconds(),
        }
        for d in found
    ]


def maintenance_runs() -> list[dict]:
    """Each maintenance runner's last completed run, and whether it is overdue."""
    from jobs.selectors import maintenance_status

    return maintenance_status()


def task_rows() -> list[dict]:
    """Tasks that are limited or paused: their limit, running jobs, busiest keys, rate holds."""
    rows = task_states.describe()
    registered = task_states.registered()
    for row in rows:
        row["summary"] = limits.summary(limits.limit_of(registered.get(row["name"])))
    return rows


def dashboard(range_name: str = "1h") -> dict:
    now = timezone.now()
    if range_name not in RANGES:
        range_name = "1h"
    return {
        "now": now,
        "queues": queue_rows(now),
        "tasks": task_rows(),
        "chart": throughput(range_name, now),
        "workers": worker_rows(now),
        "deployers": deployer_rows(now),
        "deployments": deployments_in_flight(now),
        "waiting_approval": waiting_for_approval(now),
        "maintenance": maintenance_runs(),
    }
