"""A worker process killed mid-deployment: failed/worker_lost, and no step process left."""

import os
import signal

from django.contrib.auth import get_user_model

from deployments.models import FailureReason, StepRun
from deployments.services import deployment_create
from jobs.models import Job, Notification
from tests.deployments.conftest import read_pids, wait_for
from tests.deployments.test_stopping import TREE
from tests.processes import alive, process_tree, wait_until


def test_kill_9_of_the_pool_child_fails_the_deployment_and_kills_its_steps(
    make_project, deploy_worker, tmp_path
):
    alice = get_user_model().objects.create_user("alice")
    pids = tmp_path / "pids"
    project = make_project(
        pipelines={"default": [{"name": "long", "command": TREE.format(pids=pids)}]}
    )
    worker = deploy_worker()
    deployment = deployment_create(project=project, ref="main", triggered_by="alice")
    wait_until(lambda: len(read_pids(pids)) == 4, timeout=60, message="the step's tree")
    running = wait_for(deployment, "running")
    pool_child = int(running.worker.rsplit("/", 1)[1])
    assert pool_child in worker.children()
    tree = process_tree(pool_child)  # supervisor, shell, subshell, sleeps
    assert set(read_pids(pids)) <= set(tree) and len(tree) >= 5

    os.kill(pool_child, signal.SIGKILL)

    done = wait_for(deployment, "failed", "success", "cancelled", timeout=60)
    assert done.status == "failed" and done.failure_reason == FailureReason.WORKER_LOST
    assert Job.objects.get(pk=done.job_id).status == "dead"  # never silently re-run
    assert StepRun.objects.get(deployment=done).status == "failed"
    wait_until(
        lambda: not [pid for pid in tree if alive(pid)],
        timeout=30,
        message="every process of the step tree to be gone",
    )
    assert Notification.objects.filter(recipient=alice, topic="deployment.failed").count() == 1
    assert worker.process.poll() is None  # the worker itself lives on
