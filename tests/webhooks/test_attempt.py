"""One attempt, in this process: the outcome table, Retry-After, redirects, the body excerpt."""

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from jobs.services import job_claim
from tests.webhooks.receiver import Reply
from webhooks import notify, services
from webhooks.delivery import classify, delivery_attempt, parse_retry_after
from webhooks.models import AttemptOutcome, DeliveryStatus

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
O = AttemptOutcome  # noqa: E741


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, O.DELIVERED),
        (201, O.DELIVERED),
        (204, O.DELIVERED),
        (299, O.DELIVERED),
        (301, O.FAILED),
        (307, O.FAILED),
        (400, O.FAILED),
        (401, O.FAILED),
        (404, O.FAILED),
        (409, O.FAILED),
        (422, O.FAILED),
        (499, O.FAILED),
        (408, O.RETRY),
        (425, O.RETRY),
        (429, O.RETRY),
        (500, O.RETRY),
        (502, O.RETRY),
        (503, O.RETRY),
        (599, O.RETRY),
        (410, O.GONE),
    ],
)
def test_classify(status, outcome):
    assert classify(status) == outcome


@pytest.mark.parametrize(
    ("header", "delay"),
    [
        (None, None),
        ("", None),
        ("120", 120.0),
        ("0", 0.0),
        ("99999", 900.0),  # capped
        (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30.0),
        (format_datetime(NOW - timedelta(seconds=30), usegmt=True), 0.0),
        ("soon", None),
        ("-5", None),
    ],
)
def test_retry_after(header, delay):
    assert parse_retry_after(header, now=NOW, cap=900) == delay


@pytest.fixture
def attempt(receiver, allow_private, db):
    """Return a function that sends one ``job.dead`` delivery to ``path`` in this process."""

    def send(path="/hook"):
        endpoint = services.endpoint_create(url=receiver.url(path), topics=["job.dead"])
        (delivery,) = notify("job.dead", {"job_id": 1}).deliveries.all()
        job = job_claim(delivery.job_id, worker="test/1")
        result = delivery_attempt(delivery.pk, job=job)
        delivery.refresh_from_db()
        return result, delivery, endpoint

    return send


def test_a_redirect_is_not_followed_and_fails_for_good(receiver, attempt):
    receiver.script("/hook", Reply(302, headers={"Location": "http://169.254.169.254/"}))
    result, delivery, _ = attempt()
    assert result.outcome == O.FAILED
    assert result.error == "HTTP 302: redirect to http://169.254.169.254/ not followed"
    assert len(receiver.received()) == 1
    assert delivery.status == DeliveryStatus.PENDING  # dead comes from the job engine


def test_only_the_first_4_kib_of_a_response_is_kept(receiver, attempt):
    receiver.script("/hook", Reply(500, body="é".encode() + b"x" * 100_000))
    result, delivery, _ = attempt()
    (row,) = delivery.attempts.all()
    assert result.outcome == O.RETRY and row.status_code == 500
    assert len(row.response_body.encode()) <= 4096 and row.response_body.startswith("éxxx")
    assert delivery.last_status_code == 500 and delivery.last_error == "HTTP 500"


def test_a_retry_after_on_a_retryable_answer_is_passed_on(receiver, attempt):
    receiver.script("/hook", Reply(503, headers={"Retry-After": "7"}))
    result, _, _ = attempt()
    assert result.outcome == O.RETRY and result.retry_after == 7.0


def test_an_endpoint_disabled_after_enqueue_skips_the_delivery(receiver, allow_private, db):
    endpoint = services.endpoint_create(url=receiver.url(), topics=["job.dead"])
    (delivery,) = notify("job.dead", {}).deliveries.all()
    services.endpoint_disable(endpoint_id=endpoint.pk, actor="ops")
    result = delivery_attempt(delivery.pk, job=job_claim(delivery.job_id, worker="test/1"))
    delivery.refresh_from_db()
    assert result.outcome == "skipped" and delivery.status == DeliveryStatus.SKIPPED
    assert receiver.received() == [] and not delivery.attempts.exists()


def test_a_delivery_that_is_no_longer_pending_is_not_sent(receiver, allow_private, db):
    services.endpoint_create(url=receiver.url(), topics=["job.dead"])
    (delivery,) = notify("job.dead", {}).deliveries.all()
    job = job_claim(delivery.job_id, worker="test/1")
    delivery_attempt(delivery.pk, job=job)
    assert delivery_attempt(delivery.pk, job=job).outcome == "skipped"
    assert len(receiver.received()) == 1
