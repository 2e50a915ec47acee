"""The health gate's rules from projects-as-code, and its verdict with a check command."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from deployments.deploy_locks import Holder, lock_acquire, lock_release
from deployments.health import health_evaluate, health_watch
from deployments.models import Deployment, DeploymentEvent, Environment
from deployments.projects_as_code.apply import apply_document
from deployments.projects_as_code.schema import InvalidDocument
from jobs.models import Job
from webhooks.models import Event


def document(health) -> dict:
    return {"projects": [{"slug": "web", "environments": [{"name": "prod", "health": health}]}]}


def test_health_rules_are_applied_with_their_defaults(db):
    apply_document(document({"window": "10m", "rollback": True, "check": "./ok"}))
    rules = Environment.objects.get(name="prod").health
    assert rules == {
        "window": 600,
        "check_timeout": 30,
        "max_failure_rate": 0.2,
        "min_events": 5,
        "check": "./ok",
        "rollback": True,
        "interval": None,
    }
    apply_document(document({"window": "10m", "interval": "1m"}))
    assert Environment.objects.get(name="prod").health["interval"] == 60
    apply_document(document(None))
    assert Environment.objects.get(name="prod").health == {}


@pytest.mark.parametrize(
    ("health", "error"),
    [
        ({"rollback": True}, "health.window: required"),
        ({"window": "2d"}, "health.window: required"),
        ({"window": "1m", "max_failure_rate": 1.5}, "health.max_failure_rate"),
        ({"window": "1m", "min_events": 0}, "health.min_events"),
        ({"window": "1m", "rollback": "yes"}, "health.rollback: must be true or false"),
        ({"window": "1m", "when": "always"}, "health.when: unknown key"),
        ("10m", "health: must be a mapping"),
        ({"window": "1m", "interval": "1m"}, "health.interval: a duration shorter"),
        ({"window": "1h", "interval": "1m"}, "at most 20 checks"),
    ],
)
def test_bad_health_rules_are_refused_with_their_key_path(db, health, error):
    with pytest.raises(InvalidDocument) as refused:
        apply_document(document(health))
    assert any(error in line for line in refused.value.errors), refused.value.errors


def finished(project, environment: str, *, ago: float, commit: str = "") -> Deployment:
    """A deployment that succeeded ``ago`` seconds ago, watched by its environment's gate."""
    now = timezone.now()
    deployment = Deployment.objects.create(
        project=project,
        environment=environment,
        ref="main",
        pipeline_name="default",
        commit_sha=commit,
        timeout=60,
        status="success",
        created_at=now - timedelta(seconds=ago + 1),
        updated_at=now,
        finished_at=now - timedelta(seconds=ago),
    )
    health_watch(deployment)
    return deployment


def test_a_failing_check_command_makes_a_quiet_deployment_unhealthy(
    make_project, tmp_path, monkeypatch
):
    monkeypatch.setenv("WORKER_ONLY_SECRET", "s3cr3t-of-the-worker")
    project = make_project("web", secrets={"API_TOKEN": "tok-0123456789abcdef"})
    flag = tmp_path / "down"
    # Run as a step is: the project's secrets (masked in the output), not the worker's env.
    check = (
        'echo "token $API_TOKEN as $CONVEYOR_STEP"; test -z "$WORKER_ONLY_SECRET" && '
        f"test ! -e {flag}"
    )
    rules = {"window": 60, "max_failure_rate": 0.2, "min_events": 5, "check_timeout": 5}
    Environment.objects.create(
        project=project, name="prod", health={**rules, "check": check, "rollback": False}
    )
    Environment.objects.create(project=project, name="dev")  # no gate
    # Rules the admin would refuse (durations are whole seconds there) never break a finish.
    broken = Environment.objects.create(project=project, name="qa", health={"window": "10m"})
    with pytest.raises(ValidationError, match="window: required"):
        broken.full_clean()

    assert finished(project, "dev", ago=120).health == {}
    assert finished(project, "qa", ago=120).health == {}
    passing = finished(project, "prod", ago=120)
    job = Job.objects.get(pk=passing.health["job_id"])
    assert job.task == "deployments.health_check" and job.queue == "deployments"
    assert job.run_after == passing.finished_at + timedelta(seconds=60)
    assert health_evaluate(passing.pk)["status"] == "healthy"

    flag.write_text("1")
    failing = finished(project, "prod", ago=90)
    verdict = health_evaluate(failing.pk)
    assert verdict["status"] == "unhealthy" and verdict["figures"]["after"]["events"] == 0
    assert verdict["figures"]["check"]["exit_code"] == 1
    assert verdict["figures"]["check"]["output"] == "token *** as health-check\n"
    assert verdict["reasons"] == [f"health check {check!r} failed (exit 1)"]
    # Judged once: a second run of the job changes nothing and announces nothing more.
    assert health_evaluate(failing.pk)["evaluated_at"] == verdict["evaluated_at"]
    assert Event.objects.filter(type="deployment.unhealthy").count() == 1
    assert DeploymentEvent.objects.filter(deployment=failing, kind="unhealthy").count() == 1


def test_interim_checks_end_the_watch_early_only_on_a_breach(make_project, tmp_path):
    project = make_project("web")
    flag = tmp_path / "down"
    rules = {"window": 60, "interval": 20, "max_failure_rate": 0.2, "min_events": 5}
    Environment.objects.create(
        project=project, name="prod", health={**rules, "check": f"test ! -e {flag}"}
    )
    deployment = finished(project, "prod", ago=30)
    checks = Job.objects.filter(task="deployments.health_check").order_by("run_after")
    due = [(job.run_after - deployment.finished_at).total_seconds() for job in checks]
    assert due == [20, 40, 60]
    assert [job.payload.get("interim", False) for job in checks] == [True, True, False]

    assert health_evaluate(deployment.pk, interim=True)["status"] == "watching"
    deployment.refresh_from_db()
    assert deployment.health["status"] == "watching" and "figures" not in deployment.health
    flag.write_text("1")
    early = health_evaluate(deployment.pk, interim=True)
    assert early["status"] == "unhealthy" and early["early"] is True
    assert health_evaluate(deployment.pk)["evaluated_at"] == early["evaluated_at"]


def test_the_automatic_rollback_obeys_locks_and_only_undoes_the_current_deployment(
    make_project, tmp_path
):
    project = make_project("web")
    rules = {"window": 60, "max_failure_rate": 0.2, "min_events": 5, "rollback": True}
    Environment.objects.create(project=project, name="prod", health={**rules, "check": "false"})
    good = finished(project, "prod", ago=300, commit="a" * 40)
    Deployment.objects.filter(pk=good.pk).update(health={})  # judged long ago
    bad = finished(project, "prod", ago=120, commit="b" * 40)

    lock_acquire(project, "prod", reason="incident", holder=Holder(label="ops", token_id=1))
    refused = health_evaluate(bad.pk)
    assert refused["status"] == "unhealthy" and refused["rollback"]["started"] is False
    assert "locked by ops" in refused["rollback"]["error"]
    bad.refresh_from_db()
    assert bad.health["rollback"] == refused["rollback"]
    assert not Deployment.objects.filter(undoes=bad).exists()

    # A newer success replaced it meanwhile: nothing to undo any more.
    lock_release(project, "prod", holder=Holder(label="ops", token_id=1))
    late = finished(project, "prod", ago=100, commit="c" * 40)
    newer = finished(project, "prod", ago=10, commit="d" * 40)
    assert health_evaluate(late.pk)["rollback"] == {
        "started": False,
        "error": "no longer the current deployment",
    }
    assert not Deployment.objects.filter(undoes=late).exists()

    # The current one rolls back to the last deployment not found unhealthy: good.
    rolled = health_evaluate(newer.pk)["rollback"]
    assert rolled["started"] is True
    rollback = Deployment.objects.get(pk=rolled["deployment_id"])
    assert rollback.rollback_of_id == good.pk and rollback.undoes_id == newer.pk
