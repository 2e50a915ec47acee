"""The mixed load every scenario drives, and the row-by-row check at its end (Jepsen style).

A load is side-effect jobs (a unique row per job in ``tests.side_effect``'s table, so a body
that ran twice shows), a few short deployments whose step writes its pid, and the webhook
deliveries those deployments announce to a local receiver that records every ``webhook-id``.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection

from deployments.models import Deployment, Pipeline, Project
from deployments.services import deployment_create
from jobs import services
from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep
from jobs.models import Job, JobStatus
from tests.conftest import set_steps
from tests.jobtasks import SIDE_EFFECTS_TABLE, create_side_effects_table
from tests.processes import alive, wait_until
from webhooks import services as webhook_services
from webhooks.models import Delivery, DeliveryStatus

S = JobStatus
FINAL_DEPLOYMENT = {"success", "failed", "cancelled"}
TOPICS = ["deployment.started", "deployment.succeeded", "deployment.failed"]

# Worker settings for the chaos runs: short leases (the reaper finds a killed worker's jobs
# in seconds), short webhook timeouts and backoff, quick deployment stops.
WORKER_ENV = {
    "CONVEYOR_JOB_LEASE_TIMEOUT": "5s",
    "CONVEYOR_STOP_GRACE": "2s",
    "CONVEYOR_DEPLOYMENT_WAIT": "1s",
    "CONVEYOR_WEBHOOKS_ALLOW_PRIVATE": "true",
    "CONVEYOR_WEBHOOK_TIMEOUT": "1s",
    "CONVEYOR_WEBHOOK_BACKOFF": "1s",
    "CONVEYOR_WEBHOOK_BACKOFF_MAX": "1s",
    "CONVEYOR_WEBHOOK_RETRY_AFTER_MAX": "2s",
}


@dataclass
class Load:
    job_ids: list[int]
    deployment_ids: list[int] = field(default_factory=list)
    pids: Path | None = None
    endpoint_id: int | None = None
    started: float = field(default_factory=time.monotonic)


def make_project(pids: Path, slug: str = "chaos") -> Project:
    """A project whose one step records its shell's pid and sleeps a little."""
    project = Project.objects.create(slug=slug, name=slug.title())
    command = f"echo $$ >> {pids}; sleep 0.3; echo deployed"
    set_steps(Pipeline.objects.create(project=project, name="default"), [
        {"name": "deploy", "command": command}
    ])  # fmt: skip
    return project


def start_load(
    *,
    jobs: int,
    deployments: int = 0,
    receiver=None,
    tmp_path: Path | None = None,
    sleep: float = 0.0,
) -> Load:
    """Enqueue the side-effect jobs (batched), then the deployments and their webhooks."""
    create_side_effects_table()
    load = Load(job_ids=[])
    if receiver is not None:
        load.endpoint_id = webhook_services.endpoint_create(
            url=receiver.url("/chaos"), topics=TOPICS, actor="chaos"
        ).pk
    if deployments:
        load.pids = tmp_path / "step-pids"
        project = make_project(load.pids)
        for n in range(deployments):
            load.deployment_ids.append(
                deployment_create(project=project, ref="main", environment=f"env{n}").pk
            )
    payloads = [{"sleep": sleep} for _ in range(jobs)]
    for start in range(0, jobs, 500):
        jobs_now = services.enqueue_many("tests.side_effect", payloads[start : start + 500])
        load.job_ids += [job.pk for job in jobs_now]
    return load


def side_effects(ids: list[int]) -> dict[int, int]:
    create_side_effects_table()
    wanted = set(ids)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job_id, runs FROM {SIDE_EFFECTS_TABLE}")
        return {job_id: runs for job_id, runs in cursor.fetchall() if job_id in wanted}


def unfinished(load: Load) -> int:
    """How many jobs and deployments of the load have not ended yet."""
    jobs = Job.objects.filter(pk__in=load.job_ids).exclude(status=S.SUCCEEDED).count()
    deps = Deployment.objects.filter(pk__in=load.deployment_ids)
    pending_deliveries = Delivery.objects.filter(
        endpoint_id=load.endpoint_id, status=DeliveryStatus.PENDING
    ).count()
    return jobs + deps.exclude(status__in=FINAL_DEPLOYMENT).count() + pending_deliveries


def drain(load: Load, *, timeout: float = 120, maintain: bool = True) -> float:
    """Wait until everything of the load ended, sweeping and reaping as beat would (every
    second, with the short grace the scenario set); return the seconds it took."""
    started = time.monotonic()

    def done() -> bool:
        if maintain:
            reap()
            sweep()
        return unfinished(load) == 0

    wait_until(done, timeout=timeout, interval=1, message="the load to drain")
    return time.monotonic() - started


@dataclass
class Verdict:
    lost: int
    duplicated: int
    deployments: dict[str, int]
    deliveries: int


def verify(load: Load, receiver=None, *, dead_ok: set[str] = frozenset()) -> Verdict:
    """Check every row: jobs succeeded and ran once, deployments final with no step process
    alive, every event received. ``dead_ok`` names the tasks whose jobs may end dead
    (with a reason) in this scenario."""
    effects = side_effects(load.job_ids)
    statuses = dict(Job.objects.filter(pk__in=load.job_ids).values_list("pk", "status"))
    lost = sum(1 for pk in load.job_ids if pk not in effects or statuses.get(pk) != S.SUCCEEDED)
    duplicated = sum(1 for runs in effects.values() if runs > 1)
    assert lost == 0, f"{lost} job(s) lost"
    twice = [pk for pk, runs in effects.items() if runs > 1]
    assert duplicated == 0, f"{duplicated} job(s) whose body ran twice: " + "; ".join(
        f"{pk}: {Job.objects.get(pk=pk).attempts_history}" for pk in twice[:3]
    )

    for job in Job.objects.exclude(status=S.SUCCEEDED):
        if job.status in (S.DEAD, S.CANCELLED) and job.task in dead_ok:
            assert job.reason, f"job {job.pk} ended {job.status} without a reason"
            continue
        raise AssertionError(f"job {job.pk} ({job.task}) ended {job.status}/{job.reason}")

    deployments = {}
    for deployment in Deployment.objects.filter(pk__in=load.deployment_ids):
        assert deployment.status in FINAL_DEPLOYMENT, f"deployment {deployment.pk} not final"
        deployments[deployment.status] = deployments.get(deployment.status, 0) + 1
    if load.pids is not None and load.pids.exists():
        pids = [int(p) for p in load.pids.read_text().split()]
        wait_until(
            lambda: not [pid for pid in pids if alive(pid)],
            timeout=30,
            message="every step process to be gone",
        )

    deliveries = 0
    if receiver is not None:
        rows = list(Delivery.objects.filter(endpoint_id=load.endpoint_id).select_related("event"))
        assert rows, "the deployments announced nothing"
        received = {r.header("webhook-id") for r in receiver.received("/chaos")}
        for delivery in rows:
            assert delivery.status == DeliveryStatus.DELIVERED, f"delivery {delivery.pk}"
            assert delivery.event.message_id in received, f"event {delivery.event_id} unseen"
        deliveries = len(rows)
    return Verdict(lost, duplicated, deployments, deliveries)
