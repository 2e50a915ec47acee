"""The runner end to end: a real worker runs real steps; outcomes, step runs and logs."""

from deployments.models import FailureReason, StepRun
from deployments.services import deployment_create
from jobs.models import FINISHED, Job
from tests.deployments.conftest import log_text, wait_for
from tests.processes import wait_until


def job_end(job_id: int) -> str:
    """How the deployment's job ended: its end is written after the deployment's, in the
    transaction that ends the run, so a test that saw the deployment end waits for it."""
    return wait_until(
        lambda: (
            Job.objects.filter(pk=job_id, status__in=FINISHED)
            .values_list("status", flat=True)
            .first()
        ),
        timeout=30,
        message=f"job {job_id} to end",
    )


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
    assert job_end(done.job_id) == "succeeded"
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


def test_continue_on_error_lets_the_pipeline_go_on(make_project, deploy_worker):
    project = make_project(
        pipelines={
            "default": [
                {"name": "flaky", "command": "exit 1", "continue_on_error": True},
                {"name": "after", "command": "echo still-here"},
            ]
        }
    )
    deploy_worker()
    done = wait_for(deployment_create(project=project, ref="main"), "success", "failed")
    assert done.status == "success"
    runs = StepRun.objects.filter(deployment=done).order_by("position")
    assert [(r.status, r.exit_code) for r in runs] == [("failed", 1), ("success", 0)]
    assert "still-here" in log_text(done)


def test_steps_get_an_explicit_environment_not_the_workers(make_project, deploy_worker):
    project = make_project(
        env={"FROM_PROJECT": "p"},
        pipelines={
            "default": [
                {
                    "name": "env",
                    "command": "env | sort",
                    "env": {"FROM_STEP": "s", "FROM_PROJECT": "overridden"},
                }
            ]
        },
    )
    deploy_worker(env={"WORKER_ONLY_SECRET": "leak"})
    done = wait_for(
        deployment_create(project=project, ref="v1", params={"region": "eu"}), "success", "failed"
    )
    assert done.status == "success", log_text(done)
    variables = dict(line.split("=", 1) for line in log_text(done).splitlines() if "=" in line)
    assert "WORKER_ONLY_SECRET" not in variables and "DATABASE_URL" not in variables
    assert variables["FROM_PROJECT"] == "overridden" and variables["FROM_STEP"] == "s"
    assert variables["CONVEYOR_PARAM_REGION"] == "eu"
    assert variables["CONVEYOR_DEPLOYMENT_ID"] == str(done.pk)
    assert variables["CONVEYOR_REF"] == "v1" and variables["CONVEYOR_PROJECT"] == "app"
    assert set(variables) - {"PWD", "SHLVL", "_", "OLDPWD"} <= {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TZ",
        "CI",
        "FROM_PROJECT",
        "FROM_STEP",
    } | {name for name in variables if name.startswith("CONVEYOR")}


def test_a_pending_deployment_whose_message_was_lost_still_runs(
    make_project, deploy_worker, purge_broker
):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.maintenance.sweeper import sweep

    project = make_project()
    deployment = deployment_create(project=project, ref="main")
    purge_broker()  # the broker lost the message (flushed Redis, restart, ...)
    long_ago = timezone.now() - timedelta(minutes=10)
    Job.objects.filter(pk=deployment.job_id).update(run_after=long_ago, published_at=long_ago)
    deploy_worker()
    assert sweep().republished == 1
    assert wait_for(deployment, "success", "failed").status == "success"


def test_an_unusable_workdir_fails_the_deployment_before_any_step(make_project, deploy_worker):
    project = make_project(workdir="/proc/conveyor-cannot-create-this")
    deploy_worker()
    done = wait_for(deployment_create(project=project, ref="main"), "success", "failed")
    assert (done.status, done.failure_reason) == ("failed", FailureReason.WORKDIR_ERROR)
    assert "conveyor: checkout failed: workdir" in log_text(done)
    assert job_end(done.job_id) == "succeeded"  # not a crash: no dead letter
