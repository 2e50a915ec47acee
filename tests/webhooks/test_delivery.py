"""End to end: notify() → a real worker → a real receiver on 127.0.0.1, and each outcome."""

import json

import pytest
from django.utils import timezone
from standardwebhooks import Webhook

from jobs.models import AuditLog, Job, JobStatus, Notification
from jobs.services import enqueue
from tests.processes import free_port, wait_until
from tests.webhooks.conftest import seed_verify, verify_both
from tests.webhooks.receiver import Reply
from webhooks import notify, services
from webhooks.models import AttemptOutcome, Delivery, DeliveryStatus, Endpoint

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("allow_private")]
D = DeliveryStatus
PREVIOUS = "X-Conveyor-Signature-Previous"


def make_endpoint(receiver, path="/hook", topics=("deployment.succeeded",)) -> Endpoint:
    return services.endpoint_create(url=receiver.url(path), topics=list(topics), actor="test")


def finished(delivery_id: int, *statuses):
    def check():
        delivery = Delivery.objects.select_related("job").get(pk=delivery_id)
        return delivery if delivery.status in statuses else None

    return check


def wait_delivery(delivery_id: int, *statuses, timeout: float = 60) -> Delivery:
    return wait_until(
        finished(delivery_id, *statuses), timeout=timeout, message=f"delivery {statuses}"
    )


def test_a_delivery_is_signed_both_ways_and_recorded(receiver, webhook_worker):
    endpoint = make_endpoint(receiver)
    worker = webhook_worker()
    event = notify("deployment.succeeded", {"deployment": 7, "ref": "main"})
    (delivery,) = Delivery.objects.filter(event=event)

    (request,) = receiver.wait_for(1)
    payload = verify_both(endpoint.secret, request)
    assert payload == {
        "id": event.message_id,
        "type": "deployment.succeeded",
        "timestamp": json.loads(event.body)["timestamp"],
        "data": {"deployment": 7, "ref": "main"},
    }
    assert request.body == event.body.encode()
    assert request.header("webhook-id") == event.message_id
    assert request.header("X-Conveyor-Event-Id") == event.message_id
    assert request.header("X-Conveyor-Topic") == "deployment.succeeded"
    assert request.header("webhook-timestamp") == request.header("X-Conveyor-Timestamp")
    assert request.header("User-Agent").startswith("Conveyor-Webhooks/")
    assert request.header("Content-Type") == "application/json"

    delivery = wait_delivery(delivery.pk, D.DELIVERED)
    assert delivery.last_status_code == 200 and delivery.delivered_at is not None
    assert delivery.job.status == JobStatus.SUCCEEDED
    (attempt,) = delivery.attempts.all()
    assert attempt.outcome == AttemptOutcome.DELIVERED and attempt.status_code == 200
    assert attempt.latency_ms is not None and attempt.response_body == "ok"
    assert attempt.address == "127.0.0.1" and attempt.number == 1
    assert worker.events("webhook.attempt")


def test_5xx_twice_then_200_is_delivered_on_attempt_3_with_the_same_webhook_id(
    receiver, webhook_worker
):
    endpoint = make_endpoint(receiver)
    receiver.script("/hook", Reply(500, b"boom"), Reply(503, b"busy"))
    worker = webhook_worker()
    event = notify("deployment.succeeded", {"deployment": 1})
    (delivery,) = Delivery.objects.filter(event=event)

    delivery = wait_delivery(delivery.pk, D.DELIVERED, D.DEAD)
    assert delivery.status == D.DELIVERED
    requests = receiver.received("/hook")
    assert len(requests) == 3
    assert {r.header("webhook-id") for r in requests} == {event.message_id}
    for request in requests:
        verify_both(endpoint.secret, request)
    job = wait_until(
        lambda: Job.objects.filter(pk=delivery.job_id, status=JobStatus.SUCCEEDED).first(),
        message="the delivery's job to complete",
    )
    assert job.attempts == 3
    assert [e["outcome"] for e in job.attempts_history] == ["retrying", "retrying", "succeeded"]
    attempts = list(delivery.attempts.all())
    assert [a.outcome for a in attempts] == ["retry", "retry", "delivered"]
    assert [a.status_code for a in attempts] == [500, 503, 200]
    assert [a.number for a in attempts] == [1, 2, 3]
    assert attempts[0].response_body == "boom" and attempts[0].error == "HTTP 500"
    assert len(worker.events("job.fail_retry")) == 2


def test_a_4xx_is_dead_after_one_attempt_with_its_dead_letter_and_no_loop(
    receiver, webhook_worker, staff
):
    endpoint = make_endpoint(receiver)
    watcher = make_endpoint(receiver, "/watcher", topics=["job.dead"])
    receiver.script("/hook", Reply(400, b"bad signature"))
    webhook_worker()
    event = notify("deployment.succeeded", {"deployment": 2})
    (delivery,) = Delivery.objects.filter(event=event)

    delivery = wait_delivery(delivery.pk, D.DEAD, D.DELIVERED)
    assert delivery.status == D.DEAD
    assert delivery.job.status == JobStatus.DEAD and delivery.job.attempts == 1
    assert "HTTP 400" in delivery.last_error
    (attempt,) = delivery.attempts.all()
    assert attempt.outcome == AttemptOutcome.FAILED and attempt.response_body == "bad signature"
    assert len(receiver.received("/hook")) == 1
    # The engine's dead letter: one audit row, one notice per active staff user.
    assert AuditLog.objects.filter(
        action="job.dead", target_type="job", target_id=str(delivery.job_id)
    ).exists()
    notices = Notification.objects.filter(topic="webhook.dead_letter")
    assert sorted(n.recipient_id for n in notices) == sorted(user.pk for user in staff)
    # A dead webhook is never announced as a webhook (job.dead), so nothing can loop.
    assert not Delivery.objects.filter(endpoint=watcher).exists()
    assert receiver.received("/watcher") == []
    assert Endpoint.objects.get(pk=endpoint.pk).consecutive_dead == 1

    # Replaying it sends the same message again, under a fresh job.
    services.delivery_replay(delivery_id=delivery.pk, actor="test")
    replayed = wait_delivery(delivery.pk, D.DELIVERED)
    assert replayed.replays == 1 and replayed.job_id != delivery.job_id
    second = receiver.received("/hook")[1]
    assert second.header("webhook-id") == event.message_id
    verify_both(endpoint.secret, second)
    assert Endpoint.objects.get(pk=endpoint.pk).consecutive_dead == 0


def test_410_disables_the_endpoint_and_later_events_are_skipped(receiver, webhook_worker, staff):
    endpoint = make_endpoint(receiver)
    receiver.script("/hook", Reply(410, b"gone"))
    webhook_worker()
    event = notify("deployment.succeeded", {"deployment": 3})
    (delivery,) = Delivery.objects.filter(event=event)

    delivery = wait_delivery(delivery.pk, D.DEAD, D.DELIVERED)
    assert delivery.status == D.DEAD and delivery.job.attempts == 1
    endpoint.refresh_from_db()
    assert not endpoint.enabled and endpoint.disabled_by == "gone"
    assert "410" in endpoint.disabled_reason
    assert Notification.objects.filter(topic="webhook.endpoint_disabled").count() == len(staff)

    later = notify("deployment.succeeded", {"deployment": 4})
    (skipped,) = Delivery.objects.filter(event=later)
    assert skipped.status == D.SKIPPED and skipped.job is None


def test_retry_after_is_honoured_up_to_its_cap(receiver, webhook_worker):
    make_endpoint(receiver, "/slow-down")
    make_endpoint(receiver, "/far-future")
    receiver.script("/slow-down", Reply(429, headers={"Retry-After": "2"}))
    receiver.script("/far-future", Reply(503, headers={"Retry-After": "3600"}))
    webhook_worker()  # backoff is at most 1 s here, Retry-After at most 3 s
    event = notify("deployment.succeeded", {"deployment": 5})

    for delivery in Delivery.objects.filter(event=event):
        assert wait_delivery(delivery.pk, D.DELIVERED, D.DEAD).status == D.DELIVERED
    first, second = receiver.received("/slow-down")
    assert second.at - first.at >= 1.9
    first, second = receiver.received("/far-future")
    assert 2.9 <= second.at - first.at < 30


def test_a_receiver_that_hangs_times_out_and_is_retried(receiver, webhook_worker):
    make_endpoint(receiver)
    receiver.script("/hook", Reply(200, delay=5))
    webhook_worker()  # timeout 1 s
    event = notify("deployment.succeeded", {"deployment": 6})
    (delivery,) = Delivery.objects.filter(event=event)

    delivery = wait_delivery(delivery.pk, D.DELIVERED, D.DEAD)
    assert delivery.status == D.DELIVERED and delivery.job.attempts == 2
    first, second = delivery.attempts.all()
    assert first.outcome == AttemptOutcome.RETRY and first.status_code is None
    assert "timed out" in first.error
    assert second.outcome == AttemptOutcome.DELIVERED


def test_a_receiver_that_never_answers_is_dead_once_attempts_are_spent(
    webhook_worker, settings, staff
):
    settings.CONVEYOR_WEBHOOK_MAX_ATTEMPTS = 3
    endpoint = services.endpoint_create(
        url=f"http://127.0.0.1:{free_port()}/nobody", topics=["job.dead"], actor="test"
    )
    worker = webhook_worker()
    event = notify("job.dead", {"job_id": 1})
    (delivery,) = Delivery.objects.filter(event=event)

    delivery = wait_delivery(delivery.pk, D.DEAD, D.DELIVERED)
    assert delivery.status == D.DEAD
    assert delivery.job.attempts == delivery.job.max_attempts == 3
    assert [a.outcome for a in delivery.attempts.all()] == ["retry"] * 3
    assert all("no answer" in a.error for a in delivery.attempts.all())
    assert len(worker.events("job.fail_retry")) == 2
    assert Notification.objects.filter(topic="webhook.dead_letter").count() == len(staff)
    assert Endpoint.objects.get(pk=endpoint.pk).enabled  # one dead delivery is not ten


def test_consecutive_dead_deliveries_disable_the_endpoint_then_replay_catches_up(
    receiver, webhook_worker, staff
):
    endpoint = make_endpoint(receiver)
    receiver.script("/hook", Reply(400), Reply(400))
    webhook_worker(CONVEYOR_WEBHOOK_DISABLE_AFTER=2)
    start = timezone.now()
    failed = [notify("deployment.succeeded", {"n": n}) for n in range(2)]

    for event in failed:
        (delivery,) = Delivery.objects.filter(event=event)
        assert wait_delivery(delivery.pk, D.DEAD, D.DELIVERED).status == D.DEAD
    endpoint.refresh_from_db()
    assert not endpoint.enabled and endpoint.disabled_by == "failures"
    assert endpoint.consecutive_dead == 2
    assert Notification.objects.filter(topic="webhook.endpoint_disabled").count() == len(staff)

    missed = notify("deployment.succeeded", {"n": 2})
    (skipped,) = Delivery.objects.filter(event=missed)
    assert skipped.status == D.SKIPPED and skipped.job is None

    services.endpoint_enable(endpoint_id=endpoint.pk, actor="test")
    assert services.delivery_replay_since(endpoint_id=endpoint.pk, since=start, actor="test") == 3
    for delivery in Delivery.objects.filter(endpoint=endpoint):
        assert wait_delivery(delivery.pk, D.DELIVERED, D.DEAD).status == D.DELIVERED
    delivered_ids = {r.header("webhook-id") for r in receiver.received("/hook")[2:]}
    assert delivered_ids == {e.message_id for e in [*failed, missed]}


def test_during_a_rotation_both_secrets_verify(receiver, webhook_worker):
    endpoint = make_endpoint(receiver)
    old_secret = endpoint.secret
    rotated = services.endpoint_rotate_secret(endpoint_id=endpoint.pk, actor="test")
    webhook_worker()
    notify("deployment.succeeded", {"deployment": 8})

    (request,) = receiver.wait_for(1)
    assert len(request.header("webhook-signature").split(" ")) == 2
    verify_both(rotated.secret, request)  # new secret: both recipes
    Webhook(old_secret).verify(request.body, request.headers)  # old secret: Standard Webhooks
    previous = {**request.headers, "X-Conveyor-Signature": request.header(PREVIOUS)}
    assert seed_verify(old_secret, previous, request.body)  # old secret: seed 003 recipe


def test_a_url_refused_at_delivery_time_is_a_permanent_failure(receiver, webhook_worker):
    endpoint = services.endpoint_create(
        url=f"http://localhost:{receiver.port}/hook", topics=["deployment.failed"], actor="t"
    )
    webhook_worker(CONVEYOR_WEBHOOKS_ALLOW_PRIVATE="false")
    event = notify("deployment.failed", {"deployment": 9})
    (delivery,) = Delivery.objects.filter(event=event)

    delivery = wait_delivery(delivery.pk, D.DEAD, D.DELIVERED)
    assert delivery.job.attempts == 1
    (attempt,) = delivery.attempts.all()
    assert attempt.outcome == AttemptOutcome.REFUSED
    assert "localhost resolves to" in attempt.error and "loopback" in attempt.error
    assert receiver.received() == []
    assert Endpoint.objects.get(pk=endpoint.pk).enabled


def test_a_dead_job_is_announced_as_job_dead_and_a_test_event_can_be_sent(receiver, webhook_worker):
    endpoint = make_endpoint(receiver, topics=["job.dead"])
    webhook_worker()
    job = enqueue("tests.permanent")
    wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.DEAD, message="dead job")

    (request,) = receiver.wait_for(1)
    payload = verify_both(endpoint.secret, request)
    assert payload["type"] == "job.dead"
    assert payload["data"]["job_id"] == job.pk and payload["data"]["task"] == "tests.permanent"
    assert "this can never work" in payload["data"]["error"]

    delivery = services.endpoint_send_test(endpoint_id=endpoint.pk, actor="test")
    assert wait_delivery(delivery.pk, D.DELIVERED, D.DEAD).status == D.DELIVERED
    assert verify_both(endpoint.secret, receiver.wait_for(2)[1])["type"] == "webhook.test"
