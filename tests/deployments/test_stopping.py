"""Stopping steps: timeouts and cancels end the whole process tree, two-phase."""

import time

from deployments.models import FailureReason, StepRun
from deployments.services import deployment_cancel, deployment_create
from jobs.models import Job
from tests.deployments.conftest import log_text, read_pids, wait_for
from tests.processes import alive, wait_until

# A step that leaves a tree behind it: a background child, a grandchild, and a process in a
# session of its own; each writes its pid. Then it sleeps in the foreground.
TREE = (
    "echo $$ >> {pids}; "
    "(sleep 300 & echo $! >> {pids}; wait) & echo $! >> {pids}; "
    "setsid sleep 301 & echo $! >> {pids}; "
    "echo tree-started; sleep 302"
)


def test_a_step_timeout_kills_the_whole_process_tree(make_project, deploy_worker, tmp_path):
    pids = tmp_path / "pids"
    project = make_project(
        pipelines={
            "default": [
                {"name": "hang", "command": TREE.format(pids=pids), "timeout": 2},
                {"name": "never", "command": "echo never"},
            ]
        }
    )
    deploy_worker()
    done = wait_for(deployment_create(project=project, ref="main"), "failed", "success")
    assert done.failure_reason == FailureReason.TIMED_OUT
    recorded = read_pids(pids)
    assert len(recorded) == 4
    assert [pid for pid in recorded if alive(pid)] == []  # gone before the status was written
    runs = StepRun.objects.filter(deployment=done).order_by("position")
    assert [r.status for r in runs] == ["timed_out", "skipped"]
    assert "tree-started" in log_text(done)


def test_a_step_ignoring_sigterm_is_killed_after_the_grace(make_project, deploy_worker, tmp_path):
    pids = tmp_path / "pids"
    project = make_project(
        pipelines={
            "default": [
                {
                    "name": "stubborn",
                    "command": (
                        f"trap '' TERM; echo $$ >> {pids}; sleep 300 & echo $! >> {pids}; wait"
                    ),
                    "timeout": 1,
                }
            ]
        }
    )
    deploy_worker()  # grace: 2s
    done = wait_for(deployment_create(project=project, ref="main"), "failed", "success")
    assert done.failure_reason == FailureReason.TIMED_OUT
    run = StepRun.objects.get(deployment=done)
    assert run.exit_code == -9  # SIGTERM was ignored, so SIGKILL ended it
    assert (run.finished_at - run.started_at).total_seconds() >= 1 + 2 - 0.5
    assert [pid for pid in read_pids(pids) if alive(pid)] == []


def test_the_deployment_timeout_stops_it(make_project, deploy_worker):
    project = make_project(
        deployment_timeout=8,  # room for a slow start; step b alone outlasts it
        pipelines={
            "default": [{"name": "a", "command": "sleep 1"}, {"name": "b", "command": "sleep 300"}]
        },
    )
    deploy_worker()
    done = wait_for(deployment_create(project=project, ref="main"), "failed", "success")
    assert done.failure_reason == FailureReason.TIMED_OUT
    assert [r.status for r in StepRun.objects.filter(deployment=done).order_by("position")] == [
        "success",
        "timed_out",
    ]


def test_cancel_while_running_stops_the_tree_and_ends_cancelled(
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
    worker = deploy_worker()
    deployment = deployment_create(project=project, ref="main")
    wait_until(lambda: len(read_pids(pids)) == 4, timeout=60, message="the step's tree")
    asked = time.monotonic()
    cancelling = deployment_cancel(deployment_id=deployment.pk, actor="alice")
    assert cancelling.status == "cancelling" and cancelling.cancel_requested_at is not None
    done = wait_for(deployment, "cancelled", "failed", "success")
    assert done.status == "cancelled" and done.failure_reason == FailureReason.CANCELLED
    assert time.monotonic() - asked < 15
    assert [pid for pid in read_pids(pids) if alive(pid)] == []
    runs = StepRun.objects.filter(deployment=done).order_by("position")
    assert [r.status for r in runs] == ["cancelled", "skipped"]
    # The job's end is written after the deployment's, by the task that ran it.
    wait_until(
        lambda: Job.objects.get(pk=done.job_id).status == "cancelled",
        timeout=30,
        message="the deployment's job to end cancelled",
    )
    topics = [e["topic"] for e in worker.events("deployment.event")]
    assert topics[-1] == "deployment.cancelled"


def test_cancel_of_a_pending_deployment_is_immediate(make_project):
    project = make_project()
    deployment = deployment_create(project=project, ref="main")  # no worker: stays pending
    cancelled = deployment_cancel(deployment_id=deployment.pk, actor="alice")
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    assert Job.objects.get(pk=deployment.job_id).status == "cancelled"
