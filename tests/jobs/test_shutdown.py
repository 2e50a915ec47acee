"""Graceful shutdown: SIGTERM lets running jobs finish within CONVEYOR_SHUTDOWN_GRACE, then
hands every job still running back at once."""

import os
import signal
import time
from datetime import timedelta

from django.test import override_settings

from deployments.models import FailureReason, StepRun
from deployments.services import deployment_create
from jobs import services
from jobs.maintenance.sweeper import sweep
from jobs.models import Job, JobReason, JobStatus
from tests.deployments.conftest import log_text, read_pids, wait_for
from tests.deployments.test_stopping import TREE
from tests.jobs.test_execution import executions, wait_for_status
from tests.processes import alive, wait_until

S = JobStatus
GRACE = {"CONVEYOR_SHUTDOWN_GRACE": "2s"}


def sigterm(worker) -> float:
    worker.process.send_signal(signal.SIGTERM)
    return time.monotonic()


def test_a_short_job_finishes_within_the_grace(start_worker):
    worker = start_worker(concurrency=1, env={"CONVEYOR_SHUTDOWN_GRACE": "20s"})
    job = services.enqueue("tests.record", {"sleep": 2})
    wait_for_status(job, S.RUNNING)
    sigterm(worker)
    worker.process.wait(timeout=30)
    job.refresh_from_db()
    assert job.status == S.SUCCEEDED and executions(job) == 1


def test_a_long_job_is_handed_back_at_once_and_runs_again_elsewhere(start_worker):
    first = start_worker(concurrency=1, env=GRACE)
    job = services.enqueue("tests.record", {"sleep": 60, "first_only": True})
    wait_for_status(job, S.RUNNING)
    asked = sigterm(first)
    wait_for_status(job, S.RETRYING, S.QUEUED, timeout=30)
    assert job.reason == JobReason.WORKER_SHUTDOWN
    assert job.lease_expires_at is None and job.locked_by == ""
    assert job.attempts == 0  # a shutdown spends no attempt
    first.process.wait(timeout=30)
    assert time.monotonic() - asked < 20  # the grace (2 s) plus the wind-down, not 60 s
    [entry] = job.attempts_history
    assert (entry["outcome"], entry["reason"]) == ("retrying", "worker_shutdown")
    assert entry["error"]["class_path"] == "jobs.errors.WorkerShutdown"

    second = start_worker(concurrency=1)
    # The hand-back's doorbell is published while the stopping worker still holds its broker
    # connection and may leave with it; then the sweeper re-sends it, as beat would.
    with override_settings(CONVEYOR_SWEEPER_GRACE=timedelta(seconds=1)):

        def ran() -> bool:
            job.refresh_from_db()
            if job.status == S.SUCCEEDED:
                return True
            if job.status == S.RETRYING or job.status == S.QUEUED:
                sweep()
            return False

        wait_until(ran, timeout=60, interval=2, message="the job to run again elsewhere")
    assert executions(job) == 1  # the interrupted body never got to record
    assert job.attempts_history[-1]["worker"].startswith(f"{second.name}@")


def test_a_deployment_mid_step_fails_with_worker_shutdown_and_leaves_no_process(
    make_project, deploy_worker, tmp_path
):
    pids = tmp_path / "pids"
    project = make_project(
        pipelines={
            "default": [
                {"name": "long", "command": TREE.format(pids=pids)},
                {"name": "never", "command": "echo never"},
            ]
        }
    )
    worker = deploy_worker(env=GRACE)
    deployment = deployment_create(project=project, ref="main")
    wait_until(lambda: len(read_pids(pids)) == 4, timeout=60, message="the step's tree")
    sigterm(worker)
    done = wait_for(deployment, "failed", "success", "cancelled", timeout=40)
    assert (done.status, done.failure_reason) == ("failed", FailureReason.WORKER_SHUTDOWN)
    assert [pid for pid in read_pids(pids) if alive(pid)] == []
    runs = StepRun.objects.filter(deployment=done).order_by("position")
    assert [r.status for r in runs][1] == "skipped"
    assert "the worker shut down in step 'long'" in log_text(done)
    worker.process.wait(timeout=30)
    assert Job.objects.get(pk=done.job_id).status == S.SUCCEEDED  # the runner ended it itself


def test_sigterm_stops_an_idle_worker_at_once(start_worker):
    worker = start_worker(queues="default", concurrency=1)
    stopping = sigterm(worker)
    assert worker.process.wait(timeout=30) == 0
    assert time.monotonic() - stopping < 5
    assert "worker.shutdown_grace_over" not in worker.text()  # nothing running: no grace


def test_sigterm_to_the_whole_process_group_still_gets_the_grace_and_the_hand_back(
    start_worker,
):
    """As honcho or systemd's default KillMode do: the pool child gets SIGTERM too, and must
    not end its job as a SystemExit failure."""
    worker = start_worker(concurrency=1, env=GRACE)
    job = services.enqueue("tests.record", {"sleep": 60, "first_only": True})
    wait_for_status(job, S.RUNNING)
    os.killpg(worker.pid, signal.SIGTERM)
    wait_for_status(job, S.RETRYING, S.QUEUED, S.DEAD, timeout=30)
    assert (job.status, job.reason, job.attempts) == (S.RETRYING, JobReason.WORKER_SHUTDOWN, 0)
    worker.process.wait(timeout=30)
