"""Recovery scoped to a deployment: exactly the project's dead jobs and dead webhook
deliveries between deployment N's finish and its successor's are retried, by a real worker,
through their owners' services; a dry run only counts; bad requests get the one error shape."""

import time

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from deployments.models import Deployment, Recovery, RecoveryStatus
from deployments.recovery import recovery_create
from deployments.services import deployment_create
from jobs import services
from jobs.models import AuditLog, Job, JobStatus
from tests.api.conftest import assert_error
from tests.conftest import WORKER_ENV
from tests.deployments.conftest import wait_for
from tests.security.test_people import person, token_of
from webhooks.dispatch import event_create
from webhooks.models import Delivery, DeliveryStatus, Endpoint

pytestmark = pytest.mark.usefixtures("purge_broker")
DONE = ("success", "failed", "cancelled")


@pytest.fixture
def shop(make_project):
    return make_project("shop", pipelines={"default": [{"name": "go", "command": "true"}]})


def deploy(project) -> Deployment:
    deployment = wait_for(deployment_create(project=project, ref="main"), *DONE)
    assert deployment.status == "success"
    return deployment


def dead_jobs(slug: str, count: int) -> list[int]:
    jobs = [services.enqueue("tests.permanent", {"project": slug}) for _ in range(count)]
    deadline = time.monotonic() + 30
    while Job.objects.filter(pk__in=[j.pk for j in jobs]).exclude(status=JobStatus.DEAD).exists():
        assert time.monotonic() < deadline, "the jobs did not die"
        time.sleep(0.1)
    return [job.pk for job in jobs]


def dead_delivery(endpoint: Endpoint, slug: str) -> int:
    """A delivery of an event naming ``slug`` whose last attempt failed just now."""
    event = event_create("deployment.failed", {"project": slug, "deployment_id": 0})
    now = event.created_at
    delivery = Delivery.objects.create(
        event=event,
        endpoint=endpoint,
        status=DeliveryStatus.DEAD,
        last_status_code=503,
        last_attempt_at=now,
        created_at=now,
        updated_at=now,
    )
    time.sleep(0.01)
    return delivery.pk


def retried_jobs(recovery: Recovery) -> set[int]:
    actor = f"{recovery.actor} (recovery {recovery.pk})"
    return {
        int(pk)
        for pk in AuditLog.objects.filter(action="job.retry", actor=actor).values_list(
            "target_id", flat=True
        )
    }


def replayed_deliveries(recovery: Recovery) -> set[int]:
    actor = f"{recovery.actor} (recovery {recovery.pk})"
    return {
        int(pk)
        for pk in AuditLog.objects.filter(
            action="webhook.delivery_replay", actor=actor
        ).values_list("target_id", flat=True)
    }


def wait_done(recovery_id: int, timeout: float = 30) -> Recovery:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recovery = Recovery.objects.get(pk=recovery_id)
        if recovery.status == "done":
            return recovery
        time.sleep(0.2)
    raise AssertionError(f"recovery {recovery_id} did not finish")


def test_recovery_retries_exactly_the_failures_between_a_deployment_and_the_next(
    shop, make_project, start_worker, project_api
):
    start_worker(queues="default,deployments", concurrency=2, env=WORKER_ENV)
    endpoint = Endpoint.objects.create(
        url="https://hooks.example.com/x", topics=["workspace.sync_failed"], secret="whsec_dGVzdA=="
    )
    before = dead_jobs("shop", 1) + [dead_delivery(endpoint, "shop")]
    first = deploy(shop)
    between = dead_jobs("shop", 3)
    between_delivery = dead_delivery(endpoint, "shop")
    other_project = dead_jobs("other", 2) + [dead_delivery(endpoint, "other")]
    second = deploy(shop)
    after = dead_jobs("shop", 2)
    after_delivery = dead_delivery(endpoint, "shop")
    api = project_api("deploy", shop)

    counted = api.post(f"/deployments/{first.pk}/recover", {"dry_run": True})
    assert counted.status_code == 200, counted.content
    body = counted.json()
    assert (body["jobs"], body["deliveries"], body["successor"]) == (3, 1, second.pk)
    assert body["dry_run"] is True and body["status"] == "counted" and body["id"] is None
    assert not Recovery.objects.exists()  # a dry run writes nothing
    assert all(Job.objects.get(pk=pk).status == JobStatus.DEAD for pk in between)

    # The last deployment's span runs to now: the failures after it.
    latest = api.post(f"/deployments/{second.pk}/recover", {"dry_run": True}).json()
    assert (latest["jobs"], latest["deliveries"], latest["successor"]) == (2, 1, None)

    started = api.post(f"/deployments/{first.pk}/recover", {"dry_run": False})
    assert started.status_code == 202, started.content
    assert started.json()["jobs"] == 3 and started.json()["deliveries"] == 1
    recovery = wait_done(started.json()["id"])
    listed = api.get(f"/deployments/{first.pk}/recoveries").json()["recoveries"]
    assert [(r["id"], r["status"], r["done"], r["failed"]) for r in listed] == [
        (recovery.pk, "done", 4, 0)
    ]
    assert (recovery.done, recovery.failed, recovery.errors) == (4, 0, [])
    assert retried_jobs(recovery) == set(between)
    assert replayed_deliveries(recovery) == {between_delivery}
    untouched = [str(pk) for pk in before[:1] + other_project[:2] + after]
    assert not AuditLog.objects.filter(action="job.retry", target_id__in=untouched).exists()
    for pk in [before[1], other_project[2], after_delivery]:
        assert Delivery.objects.get(pk=pk).status == DeliveryStatus.DEAD
    assert Delivery.objects.get(pk=between_delivery).replays == 1
    audit = AuditLog.objects.get(action="deployment.recover", target_id=str(first.pk))
    assert audit.actor == "token:deploy-bound" and audit.details["jobs"] == 3
    kinds = [e["kind"] for e in api.get(f"/deployments/{first.pk}/timeline").json()["events"]]
    assert "recovery" in kinds
    assert recovery.since == first.finished_at and recovery.until == second.finished_at

    # The retried jobs ran again (and died again): failures after the second deployment now.
    deadline = time.monotonic() + 30
    again = Job.objects.filter(
        pk__in=between, status=JobStatus.DEAD, finished_at__gt=second.finished_at
    )
    while again.count() < 3:
        assert time.monotonic() < deadline, "the retried jobs did not run again"
        time.sleep(0.1)

    # The deployment page: a button, a dry-run count to confirm, then the progress.
    page = f"/admin/deployments/deployment/{second.pk}/change/"
    console = Client()
    console.force_login(person("dora", "view_deployment", "recover_deployment"))
    assert 'id="recover-link"' in console.get(page).content.decode()
    confirm = console.get(f"/admin/deployments/deployment/{second.pk}/recover/").content.decode()
    assert '<b id="recover-jobs">5</b>' in confirm and '<b id="recover-deliveries">1</b>' in confirm
    assert console.post(f"/admin/deployments/deployment/{second.pk}/recover/").status_code == 302
    made = wait_done(Recovery.objects.get(deployment=second).pk)
    assert retried_jobs(made) == set(after) | set(between)
    assert replayed_deliveries(made) == {after_delivery}
    assert made.actor == "dora" and made.done == 6
    shown = console.get(page).content.decode()
    assert 'id="deployment-recoveries"' in shown and "6 retried, 0 refused of 6" in shown
    viewer = Client()
    viewer.force_login(person("vic", "view_deployment"))
    assert 'id="recover-link"' not in viewer.get(page).content.decode()
    assert viewer.get(f"/admin/deployments/deployment/{second.pk}/recover/").status_code == 403
    assert viewer.post(f"/admin/deployments/deployment/{second.pk}/recover/").status_code == 403
    # The permission alone, without seeing deployments, shows nothing and starts nothing.
    blind = Client()
    blind.force_login(person("rec", "recover_deployment"))
    assert blind.get(f"/admin/deployments/deployment/{second.pk}/recover/").status_code == 403
    assert blind.post(f"/admin/deployments/deployment/{second.pk}/recover/").status_code == 403
    assert Recovery.objects.count() == 2


def test_recovery_refuses_bad_requests_in_the_one_error_shape(shop, project_api):
    deployment = deployment_create(project=shop, ref="main")
    api = project_api("deploy", shop)
    assert_error(api.post("/deployments/999999/recover", {"dry_run": True}), 404, "not_found")
    for body in ({}, {"dry_run": "maybe"}, {"dry_run": True, "extra": 1}):
        assert_error(api.post(f"/deployments/{deployment.pk}/recover", body), 422)
    # Not finished yet: nothing follows it.
    assert_error(api.post(f"/deployments/{deployment.pk}/recover", {"dry_run": True}), 409)
    reader = project_api("read", shop)
    assert_error(reader.post(f"/deployments/{deployment.pk}/recover", {"dry_run": True}), 403)
    # A person's token needs the permission; with it, the request goes through.
    bob = token_of(person("bob"), scope="deploy")
    shop.api_tokens.add(bob.token)
    refused = assert_error(
        bob.post(f"/deployments/{deployment.pk}/recover", {"dry_run": True}), 403, "forbidden"
    )
    assert "deployments.recover_deployment" in refused["message"]
    carol = token_of(person("carol", "recover_deployment"), scope="deploy")
    shop.api_tokens.add(carol.token)
    assert_error(carol.post(f"/deployments/{deployment.pk}/recover", {"dry_run": True}), 409)
    assert not AuditLog.objects.filter(action="deployment.recover").exists()


def test_a_recovery_whose_asker_lost_the_permission_retries_nothing(shop, start_worker):
    start_worker(queues="default,deployments", concurrency=2, env=WORKER_ENV)
    first = deploy(shop)
    failed = dead_jobs("shop", 2)
    erin = person("erin", "recover_deployment")
    # Revoked before the recovery's job is published (on commit): a running worker would
    # otherwise have carried it out already.
    with transaction.atomic():
        made = recovery_create(first, actor="erin", user=erin)
        erin.user_permissions.clear()
        erin.is_active = False
        erin.save()
    done = wait_done(made.pk)
    assert done.errors == ["erin may no longer recover deployments"] and done.done == 0
    assert all(Job.objects.get(pk=pk).status == JobStatus.DEAD for pk in failed)
    assert not retried_jobs(done)


def test_one_recovery_of_a_deployment_at_a_time(shop, project_api):
    """A double click or a retried request while a recovery is queued makes no second one."""
    deployment = deployment_create(project=shop, ref="main")
    now = timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(
        status="success", started_at=now, finished_at=now
    )
    api = project_api("deploy", shop)
    path = f"/deployments/{deployment.pk}/recover"
    first = api.post(path, {"dry_run": False})
    assert first.status_code == 202, first.content
    refused = assert_error(api.post(path, {"dry_run": False}), 409, "conflict")
    assert f"recovery {first.json()['id']}" in refused["message"]
    assert api.post(path, {"dry_run": True}).status_code == 200  # counting is always fine
    assert Recovery.objects.count() == 1
    assert AuditLog.objects.filter(action="deployment.recover").count() == 1

    Recovery.objects.update(status=RecoveryStatus.DONE)  # once it has finished, another may run
    assert api.post(path, {"dry_run": False}).status_code == 202
    assert Recovery.objects.count() == 2
