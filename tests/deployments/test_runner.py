"""The runner end to end: a real worker runs real steps; outcomes, step runs and logs."""

from deployments.models import FailureReason, StepRun
from deployments.services import deployment_create
from jobs.models import Job
from tests.deployments.conftest import log_text, wait_for


def test_a_successful_deployment_runs_every_step_in_order(make_project, deploy_worker):
    project = make_project(
        pipelines={
            "default": [
                {"name": "one", "command": "echo first; echo to-stderr >&2"},
                {"name": "two", "command": 'echo "second in $CONVEYOR_ENVIRONMENT"'},
            ]
        }
    )
    worker = deploy_worker()
    deployment = deployment_create(project=project, ref="main", environment="staging")
    done = wait_for(deployment, "success", "failed", "cancelled")
    assert done.status == "success" and done.failure_reason == ""
    assert done.started_at and done.finished_at and done.finished_at >= done.started_at
    runs = list(StepRun.objects.filter(deployment=done).order_by("position"))
    assert [(r.name, r.status, r.exit_code) for r in runs] == [
        ("one", "success", 0),
        ("two", "success", 0),
    ]
    text = log_text(done)
    assert text.index("first") < text.index("to-stderr") < text.index("second in staging")
    assert Job.objects.get(pk=done.job_id).status == "succeeded"
    started = [e for e in worker.events("deployment.event") if e["topic"] == "deployment.started"]
    assert started and started[0]["deployment_id"] == done.pk
    assert {"pipeline", "project", "project_dir", "status"} <= set(started[0])


def test_a_failing_step_fails_the_deployment_and_skips_the_rest(make_project, deploy_worker):
    project = make_project(
        pipelines={
            "default": [
                {"name": "ok", "command": "echo fine"},
                {"name": "bad", "command": "echo broken; exit 3"},
                {"name": "never", "command": "echo should-not-run"},
            ]
        }
    )
    deploy_worker()
    deployment = deployment_create(project=project, ref="main")
    done = wait_for(deployment, "success", "failed", "cancelled")
    assert done.status == "failed" and done.failure_reason == FailureReason.STEP_FAILED
    runs = list(StepRun.objects.filter(deployment=done).order_by("position"))
    assert [(r.status, r.exit_code) for r in runs] == [
        ("success", 0),
        ("failed", 3),
        ("skipped", None),
    ]
    assert "should-not-run" not in log_text(done)
