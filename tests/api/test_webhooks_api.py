"""The webhook endpoints and deliveries API (admin scope), down to a real receiver."""

import pytest
from django.utils import timezone

from jobs.models import Job
from tests.api.conftest import assert_error
from tests.processes import wait_until
from tests.webhooks.conftest import receiver, verify_both, webhook_worker  # noqa: F401 - fixtures
from webhooks import notify
from webhooks.models import Delivery, Endpoint

pytestmark = pytest.mark.usefixtures("purge_broker")


def test_webhooks_need_the_admin_scope(make_api):
    api = make_api("deploy")
    assert_error(api.get("/webhooks/endpoints"), 403, "forbidden")
    assert_error(
        api.post("/webhooks/endpoints", {"url": "https://example.com/h", "topics": ["job.dead"]}),
        403,
    )
    assert_error(api.get("/webhooks/deliveries"), 403)
    assert Endpoint.objects.count() == 0


@pytest.mark.django_db
def test_create_shows_the_secret_once_and_refuses_bad_input(make_api):
    api = make_api("admin")
    created = api.post(
        "/webhooks/endpoints",
        {"url": "https://hooks.example.com/in", "topics": ["deployment.failed", "job.dead"]},
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["secret"].startswith("whsec_") and body["enabled"] is True
    assert body["topics"] == ["deployment.failed", "job.dead"]
    listed = api.get("/webhooks/endpoints").json()
    assert [e["id"] for e in listed] == [body["id"]] and "secret" not in listed[0]
    assert "secret" not in api.get(f"/webhooks/endpoints/{body['id']}").json()

    error = assert_error(
        api.post("/webhooks/endpoints", {"url": "https://x.example.com", "topics": ["nope"]}), 422
    )
    assert error["code"] == "unknown_topic"
    for url in (
        "http://169.254.169.254/latest",
        "http://10.0.0.1/hook",
        "http://localhost:8000/h",
        "ftp://example.com/x",
    ):
        error = assert_error(
            api.post("/webhooks/endpoints", {"url": url, "topics": ["job.dead"]}), 422
        )
        assert error["code"] == "unsafe_url", url
    assert_error(
        api.post(
            "/webhooks/endpoints",
            {"url": "https://a.example.com", "topics": ["job.dead"], "colour": 1},
        ),
        422,
        "invalid",
    )
    assert Endpoint.objects.count() == 1


@pytest.mark.django_db
def test_update_disable_enable_rotate_and_delete(make_api):
    api = make_api("admin")
    created = api.post(
        "/webhooks/endpoints", {"url": "https://hooks.example.com/in", "topics": ["job.dead"]}
    )
    endpoint_id, first_secret = created.json()["id"], created.json()["secret"]
    patched = api.patch(
        f"/webhooks/endpoints/{endpoint_id}", {"topics": ["worktree.pruned"], "enabled": False}
    )
    assert patched.status_code == 200
    assert patched.json()["topics"] == ["worktree.pruned"] and patched.json()["enabled"] is False
    assert (
        api.patch(f"/webhooks/endpoints/{endpoint_id}", {"enabled": True}).json()["enabled"] is True
    )
    rotated = api.post(f"/webhooks/endpoints/{endpoint_id}/rotate-secret").json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != first_secret
    endpoint = Endpoint.objects.get(pk=endpoint_id)
    assert endpoint.previous_secret == first_secret
    assert_error(api.patch(f"/webhooks/endpoints/{endpoint_id}", {"topics": ["bogus"]}), 422)
    assert (
        api.client.delete(
            f"/api/v1/webhooks/endpoints/{endpoint_id}", headers=api.headers
        ).status_code
        == 204
    )
    assert_error(api.get(f"/webhooks/endpoints/{endpoint_id}"), 404)
    assert_error(api.patch(f"/webhooks/endpoints/{endpoint_id}", {"enabled": True}), 404)


def test_a_test_event_reaches_a_real_receiver_signed(make_api, receiver, webhook_worker, settings):  # noqa: F811
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True
    api = make_api("admin")
    created = api.post(
        "/webhooks/endpoints", {"url": receiver.url(), "topics": ["job.dead"]}
    ).json()
    webhook_worker()
    sent = api.post(f"/webhooks/endpoints/{created['id']}/test")
    assert sent.status_code == 202, sent.content
    (request,) = receiver.wait_for(1)
    payload = verify_both(created["secret"], request)
    assert payload["type"] == "webhook.test"

    def delivered():
        detail = api.get(f"/webhooks/deliveries/{sent.json()['id']}").json()
        return detail if detail["status"] == "delivered" else None

    detail = wait_until(delivered, timeout=60, message="the delivery to be recorded")
    assert detail["attempts"][0]["status_code"] == 200 and detail["attempts"][0]["outcome"]
    assert detail["event_id"] == request.header("webhook-id")


def test_deliveries_filter_and_replay_conflicts(make_api, settings):
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True
    api = make_api("admin")
    endpoint_id = api.post(
        "/webhooks/endpoints", {"url": "http://127.0.0.1:9/h", "topics": ["job.dead"]}
    ).json()["id"]
    notify("job.dead", {"job_id": 1})
    notify("job.dead", {"job_id": 2})
    deliveries = api.get("/webhooks/deliveries", endpoint=endpoint_id).json()
    assert len(deliveries) == 2 and {d["status"] for d in deliveries} == {"pending"}
    assert api.get("/webhooks/deliveries", status="dead").json() == []
    pending = deliveries[0]["id"]
    assert_error(api.post(f"/webhooks/deliveries/{pending}/replay"), 409, "conflict")
    Delivery.objects.filter(pk=pending).update(status="dead")
    Job.objects.filter(pk=deliveries[0]["job"]).update(status="dead")
    replayed = api.post(f"/webhooks/deliveries/{pending}/replay")
    assert replayed.status_code == 202 and replayed.json()["status"] == "pending"
    assert replayed.json()["replays"] == 1
    since = (timezone.now() - timezone.timedelta(hours=1)).isoformat()
    Delivery.objects.filter(endpoint_id=endpoint_id).update(status="dead")
    bulk = api.post(f"/webhooks/endpoints/{endpoint_id}/replay", {"since": since})
    assert bulk.status_code == 202 and bulk.json() == {"replayed": 2}
    assert_error(api.post("/webhooks/deliveries/999999/replay"), 404)
    assert_error(api.get("/webhooks/deliveries", status="bogus"), 422)
