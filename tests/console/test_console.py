"""The console without a browser: /metrics, permissions of buttons, owners' retry and cancel."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from deployments.models import Deployment, DeploymentStatus
from deployments.services import deployment_create
from jobs import owners
from jobs.models import Job, JobStatus, WorkerHeartbeat
from jobs.owners import OwnerRefused
from project.access.models import TokenScope
from project.access.tokens import token_create
from tests.api.conftest import make_api  # noqa: F401 - fixture
from webhooks import services as webhooks
from webhooks.dispatch import notify
from webhooks.models import Delivery, DeliveryStatus

pytestmark = pytest.mark.django_db


def client(user=None) -> Client:
    c = Client(HTTP_HOST="127.0.0.1")
    if user is not None:
        c.force_login(user)
    return c


def samples(text: str) -> dict:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


@pytest.fixture
def endpoint(settings):
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True
    return webhooks.endpoint_create(url="http://127.0.0.1:9/hook", topics=["job.dead"])


def _refused(response, status: int, code: str) -> bool:
    return response.status_code == status and response.json()["error"]["code"] == code


def test_metrics_need_an_admin_token_or_an_allowed_address(settings):
    _, deploy = token_create(name="ci", scope=TokenScope.DEPLOY)
    _, admin = token_create(name="prom", scope=TokenScope.ADMIN)
    assert _refused(client().get("/metrics"), 401, "unauthorized")  # the API's error shape
    wrong = client().get("/metrics", HTTP_AUTHORIZATION="Bearer cvy_x")
    assert _refused(wrong, 401, "unauthorized")
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {deploy}"}
    assert _refused(client().get("/metrics", **bearer), 403, "forbidden")
    assert client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {admin}").status_code == 200
    # An admin token that acts for a person answers only if that person may see the metrics.
    person = get_user_model().objects.create_user("runner", is_staff=True)
    _, personal = token_create(name="runner-admin", scope=TokenScope.ADMIN, user=person)
    response = client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {personal}")
    assert _refused(response, 403, "forbidden")
    person.user_permissions.add(Permission.objects.get(codename="view_job"))
    assert client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {personal}").status_code == 200
    settings.CONVEYOR_METRICS_ALLOW = "10.0.0.0/8, 127.0.0.1"
    assert client().get("/metrics").status_code == 200
    settings.CONVEYOR_METRICS_ALLOW = "10.0.0.0/8"
    assert _refused(client().get("/metrics"), 401, "unauthorized")


def test_metrics_numbers_match_the_database(settings, make_project, endpoint):
    settings.CONVEYOR_METRICS_ALLOW = "127.0.0.1"
    project = make_project()
    with transaction.atomic():
        running = deployment_create(project=project, ref="main")
        deployment_create(project=project, ref="main", environment="staging")
        notify("job.dead", {"title": "x"})
    now = timezone.now()
    Deployment.objects.filter(pk=running.pk).update(
        status=DeploymentStatus.FAILED,
        started_at=now - timezone.timedelta(seconds=30),
        finished_at=now,
    )
    Job.objects.filter(task="webhooks.deliver").update(status=JobStatus.DEAD, finished_at=now)
    WorkerHeartbeat.objects.create(
        name="w1@host", hostname="host", pid=1, started_at=now, last_seen_at=now
    )
    WorkerHeartbeat.objects.create(
        name="w2@host", hostname="host", pid=2, started_at=now, last_seen_at=now
    )
    WorkerHeartbeat.objects.filter(name="w2@host").update(
        last_seen_at=now - timezone.timedelta(minutes=5)
    )
    response = client().get("/metrics")
    assert response.status_code == 200
    found = samples(response.content.decode())
    labels = (("queue", "deployments"), ("status", "queued"), ("task", "deployments.run"))
    assert (
        found[("conveyor_jobs", labels)]
        == Job.objects.filter(task="deployments.run", status="queued").count()
        == 2
    )
    assert found[("conveyor_dead_letters", (("queue", "webhooks"),))] == 1
    assert found[("conveyor_deployments", (("status", "failed"),))] == 1
    assert found[("conveyor_deployments", (("status", "pending"),))] == 1
    assert found[("conveyor_deployment_duration_seconds_count", (("status", "failed"),))] == 1
    assert found[("conveyor_deployment_duration_seconds_sum", (("status", "failed"),))] == 30
    assert found[("conveyor_webhook_deliveries", (("status", "pending"),))] == 1
    assert found[("conveyor_workers_alive", ())] == 1
    assert found[("conveyor_job_oldest_queued_age_seconds", (("queue", "deployments"),))] >= 0


def test_a_view_only_user_sees_no_button_and_cannot_post(django_user_model, make_project):
    deployment = deployment_create(project=make_project(), ref="main")
    viewer = django_user_model.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.set(
        Permission.objects.filter(
            codename__in=["view_job", "view_deployment", "view_delivery", "view_endpoint"]
        )
    )
    c = client(viewer)
    page = c.get(f"/admin/deployments/deployment/{deployment.pk}/change/").content.decode()
    assert 'name="cancel"' not in page and 'name="retry"' not in page
    assert "deployment-log" in page and "deployment-timeline" in page
    page = c.get(f"/admin/jobs/job/{deployment.job_id}/change/").content.decode()
    assert 'name="cancel"' not in page
    listing = c.get("/admin/jobs/job/").content.decode()
    assert "cancel_jobs" not in listing and "retry_jobs" not in listing
    assert c.post(f"/admin/jobs/job/{deployment.job_id}/cancel/").status_code == 403
    assert c.post(f"/admin/deployments/deployment/{deployment.pk}/cancel/").status_code == 403
    assert Deployment.objects.get(pk=deployment.pk).status == DeploymentStatus.PENDING
    # The change permission alone is not the cancel permission; cancel_deployment is.
    viewer.user_permissions.add(Permission.objects.get(codename="change_deployment"))
    c = client(django_user_model.objects.get(pk=viewer.pk))
    page = c.get(f"/admin/deployments/deployment/{deployment.pk}/change/").content.decode()
    assert 'name="cancel"' not in page
    viewer.user_permissions.add(Permission.objects.get(codename="cancel_deployment"))
    c = client(django_user_model.objects.get(pk=viewer.pk))
    page = c.get(f"/admin/deployments/deployment/{deployment.pk}/change/").content.decode()
    assert 'name="cancel"' in page and 'name="retry"' not in page


def test_cancelling_a_retrying_delivery_job_ends_the_delivery(endpoint):
    with transaction.atomic():
        notify("job.dead", {"title": "x"})
    delivery = Delivery.objects.get()
    Job.objects.filter(pk=delivery.job_id).update(status=JobStatus.RETRYING, attempts=1)
    job = owners.job_cancel(delivery.job_id, actor="alice")
    assert job.status == JobStatus.CANCELLED
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DEAD and delivery.last_error == "cancelled by alice"
    # Its endpoint does not count it as a receiver failure.
    endpoint.refresh_from_db()
    assert endpoint.consecutive_dead == 0


def test_retrying_a_dead_delivery_job_replays_the_delivery(endpoint):
    with transaction.atomic():
        notify("job.dead", {"title": "x"})
    delivery = Delivery.objects.get()
    Job.objects.filter(pk=delivery.job_id).update(status=JobStatus.DEAD)
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.DEAD)
    new = owners.job_retry(delivery.job_id, actor="alice")
    delivery.refresh_from_db()
    assert new.pk != delivery.job_id or new.status == JobStatus.QUEUED
    assert delivery.status == DeliveryStatus.PENDING and delivery.job_id == new.pk
    assert new.status == JobStatus.QUEUED and new.payload == {
        "delivery_id": delivery.pk,
        "endpoint_id": delivery.endpoint_id,
    }


def test_a_deployment_job_follows_the_deployment_rules(make_project):
    deployment = deployment_create(project=make_project(), ref="main")
    with pytest.raises(OwnerRefused):
        owners.job_retry(deployment.job_id, actor="alice")  # not finished: no retry
    owners.job_cancel(deployment.job_id, actor="alice")
    assert Deployment.objects.get(pk=deployment.pk).status == DeploymentStatus.CANCELLED
    new = owners.job_retry(deployment.job_id, actor="alice")
    retried = Deployment.objects.get(job_id=new.pk)
    assert retried.retry_of_id == deployment.pk and retried.triggered_by == "alice"


def test_timeline_api_lists_events_in_time_order(make_project, make_api):  # noqa: F811
    deployment = deployment_create(project=make_project(), ref="main", triggered_by="ci")
    api = make_api("admin")
    assert api.post(f"/deployments/{deployment.pk}/cancel").status_code == 202
    response = api.get(f"/deployments/{deployment.pk}/timeline")
    assert response.status_code == 200, response.content
    events = response.json()["events"]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "created" and "cancel_requested" in kinds and "finished" in kinds
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    assert any(
        e["kind"] == "webhook_event" and e["topic"] == "deployment.cancelled" for e in events
    )


def test_the_api_docs_and_the_console_load_nothing_from_outside(admin_client):
    for url in ("/api/v1/docs", "/admin/dashboard/", "/admin/"):
        page = admin_client.get(url, HTTP_HOST="127.0.0.1").content.decode()
        assert 'src="http' not in page and 'href="http' not in page, url
    assert client().get("/").headers["Location"] == "/admin/dashboard/"
