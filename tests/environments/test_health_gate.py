"""The health gate: a deployment followed by a burst of failing jobs is judged unhealthy at
its (short) window's end by a real worker, and rolled back where the environment says so."""

import time

import pytest
from django.test import Client

from deployments.dora import dora_metrics
from deployments.models import Deployment, Environment
from deployments.services import deployment_create
from jobs import services
from jobs.models import AuditLog, Job
from tests.conftest import WORKER_ENV
from tests.deployments.conftest import commit, wait_for
from tests.processes import wait_until
from webhooks.models import Event

pytestmark = pytest.mark.usefixtures("purge_broker")
DONE = ("success", "failed", "cancelled")
# Long enough for a burst of a few jobs to end inside it on a busy machine.
WINDOW = 6


@pytest.fixture
def shop(make_project, git_repo):
    project = make_project(
        "shop", repo=str(git_repo), pipelines={"default": [{"name": "go", "command": "true"}]}
    )
    rules = {
        "window": WINDOW,
        "max_failure_rate": 0.2,
        "min_events": 3,
        "check": "",
        "check_timeout": 30,
    }
    Environment.objects.create(
        project=project, name="production", health={**rules, "rollback": True}
    )
    Environment.objects.create(project=project, name="staging", health={**rules, "rollback": False})
    return project


def deploy(project, environment: str) -> Deployment:
    return wait_for(deployment_create(project=project, ref="main", environment=environment), *DONE)


def wait_health(deployment: Deployment, status: str, timeout: float = 40) -> Deployment:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deployment.refresh_from_db()
        if (deployment.health or {}).get("status") == status:
            return deployment
        time.sleep(0.2)
    raise AssertionError(f"deployment {deployment.pk} health {deployment.health}, not {status}")


def burst(project, *, failing: int, succeeding: int) -> list[Job]:
    """Jobs of ``project`` (their payload names it) that die, and some that succeed."""
    jobs = [services.enqueue("tests.permanent", {"project": project.slug}) for _ in range(failing)]
    jobs += [services.enqueue("tests.record", {"project": project.slug}) for _ in range(succeeding)]
    # Another project's failures never count.
    jobs += [services.enqueue("tests.permanent", {"project": "other"}) for _ in range(3)]
    deadline = time.monotonic() + 30
    while Job.objects.filter(pk__in=[j.pk for j in jobs], finished_at__isnull=True).exists():
        assert time.monotonic() < deadline, "the burst did not finish"
        time.sleep(0.1)
    return jobs


def burst_after(deployment: Deployment, **counts) -> None:
    """A burst that ends inside ``deployment``'s window (else the test says so, not the gate)."""
    jobs = burst(deployment.project, **counts)
    last = max(
        Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("finished_at", flat=True)
    )
    assert (last - deployment.finished_at).total_seconds() < WINDOW, "the machine is too slow"


def two_deployments(shop, git_repo, environment: str) -> tuple[Deployment, Deployment]:
    first = deploy(shop, environment)
    assert first.status == "success" and first.health["status"] == "watching"
    first = wait_health(first, "healthy")  # a quiet window: nothing failed
    assert first.health["figures"]["after"]["events"] == 0 and first.health["reasons"] == []
    commit(git_repo, "2")
    second = deploy(shop, environment)
    assert second.status == "success" and second.commit_sha != first.commit_sha
    return first, second


def test_a_burst_of_failures_marks_the_deployment_unhealthy_and_rolls_it_back(
    shop, git_repo, start_worker, project_api, admin_user
):
    start_worker(queues="default,deployments", concurrency=2, env=WORKER_ENV)
    first, second = two_deployments(shop, git_repo, "production")
    burst_after(second, failing=5, succeeding=1)
    second = wait_health(second, "unhealthy")

    after = second.health["figures"]["after"]
    assert after["jobs"]["dead"] == 5 and after["events"] == 6 and after["failures"] == 5
    assert after["failure_rate"] == pytest.approx(5 / 6, abs=1e-3)
    assert second.health["figures"]["before"]["failures"] == 0
    assert "failure rate 83.33%" in second.health["reasons"][0]

    # The rollback started by itself, through the rollback service, with its reason audited
    # (just after the verdict's own commit, so it may take a moment to appear).
    rollback = wait_until(
        lambda: Deployment.objects.filter(undoes=second).first(),
        timeout=30,
        message="the health gate's rollback",
    )
    assert rollback.rollback_of_id == first.pk and rollback.triggered_by == "health-gate"
    assert rollback.commit_sha == first.commit_sha
    assert wait_for(rollback, *DONE).status == "success"
    second.refresh_from_db()
    assert second.health["rollback"] == {
        "started": True,
        "deployment_id": rollback.pk,
        "status": "pending",
    }
    audit = AuditLog.objects.get(action="deployment.rollback", target_id=str(second.pk))
    assert audit.actor == "health-gate" and "unhealthy" in audit.details["reason"]
    assert AuditLog.objects.filter(action="deployment.unhealthy", target_id=str(second.pk)).exists()
    event = Event.objects.get(type="deployment.unhealthy")
    assert (
        event.data["deployment_id"] == second.pk and event.data["figures"]["after"]["events"] == 6
    )

    # The figures on the API's deployment JSON and in the timeline.
    api = project_api("read", shop)
    body = api.get(f"/deployments/{second.pk}").json()
    assert body["health"]["status"] == "unhealthy"
    assert body["health"]["figures"]["after"]["failures"] == 5
    assert body["health"]["rollback"]["deployment_id"] == rollback.pk
    assert api.get(f"/deployments/{first.pk}").json()["health"]["status"] == "healthy"
    kinds = [e["kind"] for e in api.get(f"/deployments/{second.pk}/timeline").json()["events"]]
    assert kinds.index("finished") < kinds.index("unhealthy") < kinds.index("rolled_back")

    # ... and on the deployment page.
    console = Client()
    console.force_login(admin_user)
    page = console.get(f"/admin/deployments/deployment/{second.pk}/change/").content.decode()
    assert '<b class="pill failed" id="health-status">unhealthy</b>' in page
    assert "failure rate 83.33%" in page and f"deployment #{rollback.pk}</a>" in page
    assert 'data-kind="unhealthy"' in page and 'data-kind="rolled_back"' in page
    listed = console.get("/admin/deployments/deployment/?environment=production").content.decode()
    assert '<td class="field-health_status">unhealthy</td>' in listed

    # DORA counts the unhealthy deployment as a failed change, restored by the rollback.
    dora = dora_metrics(project=shop, environment="production", days=1)
    assert dora["change_failure_rate"] == {"changes": 2, "failed": 1, "rate": 0.5}
    assert dora["time_to_restore"]["restored"] == 1


def test_an_environment_without_rollback_is_only_marked_and_a_quiet_window_stays_healthy(
    shop, git_repo, start_worker
):
    start_worker(queues="default,deployments", concurrency=2, env=WORKER_ENV)
    first, second = two_deployments(shop, git_repo, "staging")
    burst_after(second, failing=5, succeeding=1)
    second = wait_health(second, "unhealthy")
    assert second.health["figures"]["after"]["jobs"]["dead"] == 5
    assert "rollback" not in second.health
    assert not Deployment.objects.filter(undoes=second).exists()
    assert Deployment.objects.filter(project=shop).count() == 2
    # Two failures among many successes stay under the rate: the next one is healthy.
    commit(git_repo, "3")
    third = deploy(shop, "staging")
    burst_after(third, failing=1, succeeding=9)
    third = wait_health(third, "healthy")
    assert third.health["figures"]["after"]["jobs"]["dead"] == 1
    assert third.health["figures"]["after"]["failure_rate"] == pytest.approx(0.1)
