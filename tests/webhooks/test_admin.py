"""The admin: pages render, and each action goes through its service."""

import pytest
from django.contrib.messages import get_messages
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from jobs.models import AuditLog
from jobs.services import job_bury, job_claim
from webhooks import notify, services
from webhooks.models import Delivery, DeliveryAttempt, DeliveryStatus, Endpoint

pytestmark = pytest.mark.django_db
URL = "https://93.184.215.14/hook"


@pytest.fixture
def endpoint():
    return services.endpoint_create(url=URL, topics=["job.dead"], actor="test")


def dead_delivery(endpoint) -> Delivery:
    (delivery,) = notify("job.dead", {"job_id": 1}).deliveries.all()
    job = job_claim(delivery.job_id, worker="test/1")
    DeliveryAttempt.objects.create(
        delivery=delivery,
        job_id=job.pk,
        number=1,
        started_at=timezone.now(),
        status_code=500,
        latency_ms=12,
        response_body="oops",
        error="HTTP 500",
        outcome="retry",
    )
    job_bury(Q(pk=job.pk), error="DeliveryFailed: HTTP 500")
    delivery.refresh_from_db()
    return delivery


def action(admin_client, model: str, name: str, ids, **extra):
    return admin_client.post(
        reverse(f"admin:webhooks_{model}_changelist"),
        {"action": name, "_selected_action": [str(i) for i in ids], **extra},
        follow=True,
    )


def texts(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_the_pages_render(admin_client, endpoint):
    delivery = dead_delivery(endpoint)
    for name, args in [
        ("webhooks_endpoint_changelist", []),
        ("webhooks_endpoint_add", []),
        ("webhooks_endpoint_change", [endpoint.pk]),
        ("webhooks_delivery_changelist", []),
        ("webhooks_delivery_change", [delivery.pk]),
        ("webhooks_event_changelist", []),
        ("webhooks_event_change", [delivery.event_id]),
    ]:
        response = admin_client.get(reverse(f"admin:{name}", args=args))
        assert response.status_code == 200, name
    page = admin_client.get(reverse("admin:webhooks_delivery_change", args=[delivery.pk]))
    assert b"oops" in page.content and b"HTTP 500" in page.content
    assert endpoint.secret.encode() not in page.content


def test_adding_an_endpoint_shows_its_secret_once(admin_client):
    response = admin_client.post(
        reverse("admin:webhooks_endpoint_add"),
        {"url": URL, "description": "ci", "topics": ["job.dead", "deployment.failed"]},
        follow=True,
    )
    endpoint = Endpoint.objects.get()
    assert endpoint.topics == ["deployment.failed", "job.dead"]
    assert any(endpoint.secret in text for text in texts(response))
    page = admin_client.get(reverse("admin:webhooks_endpoint_change", args=[endpoint.pk]))
    assert endpoint.secret.encode() not in page.content


def test_an_unsafe_url_is_a_form_error(admin_client):
    response = admin_client.post(
        reverse("admin:webhooks_endpoint_add"),
        {"url": "http://169.254.169.254/latest", "topics": ["job.dead"]},
    )
    assert response.status_code == 200
    assert b"169.254.169.254 is a link-local address" in response.content
    assert not Endpoint.objects.exists()


def test_endpoint_actions_call_the_services(admin_client, endpoint):
    action(admin_client, "endpoint", "disable", [endpoint.pk])
    assert not Endpoint.objects.get(pk=endpoint.pk).enabled
    action(admin_client, "endpoint", "enable", [endpoint.pk])
    assert Endpoint.objects.get(pk=endpoint.pk).enabled
    response = action(admin_client, "endpoint", "rotate_secret", [endpoint.pk])
    rotated = Endpoint.objects.get(pk=endpoint.pk)
    assert rotated.previous_secret == endpoint.secret
    assert any(rotated.secret in text for text in texts(response))
    action(admin_client, "endpoint", "send_test", [endpoint.pk])
    assert Delivery.objects.filter(endpoint=endpoint, event__type="webhook.test").exists()


def test_replay_actions(admin_client, endpoint):
    first, second = dead_delivery(endpoint), dead_delivery(endpoint)
    response = action(admin_client, "delivery", "replay", [first.pk])
    assert "Replayed 1 item(s)." in texts(response)
    assert Delivery.objects.get(pk=first.pk).status == DeliveryStatus.PENDING
    response = action(admin_client, "delivery", "replay", [first.pk])
    assert any("still being delivered" in text for text in texts(response))

    page = action(admin_client, "endpoint", "replay_since", [endpoint.pk])
    assert b"Replay dead and skipped deliveries" in page.content
    since = first.created_at
    response = action(
        admin_client,
        "endpoint",
        "replay_since",
        [endpoint.pk],
        apply="1",
        since_0=since.strftime("%Y-%m-%d"),
        since_1=since.strftime("%H:%M:%S"),
    )
    assert "Replayed 1 delivery(ies)." in texts(response)
    assert Delivery.objects.get(pk=second.pk).status == DeliveryStatus.PENDING


def test_deleting_an_endpoint_goes_through_the_service(admin_client, endpoint):
    action(admin_client, "endpoint", "delete_selected", [endpoint.pk], post="yes")
    assert not Endpoint.objects.exists()
    assert AuditLog.objects.filter(action="webhook.endpoint_delete", actor="admin").count() == 1
