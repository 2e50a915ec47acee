"""Several writes in one round trip: one PostgreSQL statement, a transaction elsewhere."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.services import job_claim
from tests.webhooks.receiver import Reply
from webhooks import notify, services, statements
from webhooks.delivery import delivery_attempt
from webhooks.errors import DeliveryConflict
from webhooks.models import AttemptOutcome, Delivery, DeliveryAttempt, DeliveryStatus, Endpoint
from webhooks.transitions import delivery_move_row

pytestmark = pytest.mark.django_db
URL = "https://93.184.215.14/hook"


@pytest.fixture(params=["postgresql", "other"])
def vendor(request, monkeypatch):
    """Run the test on PostgreSQL's one-statement path and on the transaction fallback."""
    if request.param != "postgresql":
        monkeypatch.setattr(connection, "vendor", "sqlite")
    return request.param


@pytest.fixture
def delivery() -> Delivery:
    services.endpoint_create(url=URL, topics=["job.dead"])
    (delivery,) = notify("job.dead", {}).deliveries.all()
    return delivery


def attempt_row(delivery: Delivery, **fields) -> DeliveryAttempt:
    values = {"number": 1, "started_at": timezone.now(), "outcome": AttemptOutcome.DELIVERED}
    return DeliveryAttempt(delivery_id=delivery.pk, **{**values, **fields})


def test_all_statements_are_written_and_the_last_ones_rowcount_is_returned(delivery, vendor):
    writes = [
        statements.insert(attempt_row(delivery, status_code=204, address="10.0.0.7")),
        statements.update_row(Endpoint, delivery.endpoint_id, {"description": "x"}),
        statements.update_row(Delivery, delivery.pk, {"last_status_code": 204}),
    ]
    with CaptureQueriesContext(connection) as queries:
        assert statements.execute_together(writes) == 1
    kinds = [q["sql"].split()[0] for q in queries.captured_queries]
    if vendor == "postgresql":
        assert kinds == ["WITH"]
    else:
        assert kinds == ["SAVEPOINT", "INSERT", "UPDATE", "UPDATE", "RELEASE"]
    (attempt,) = DeliveryAttempt.objects.filter(delivery=delivery)
    assert attempt.status_code == 204 and attempt.address == "10.0.0.7"
    assert Endpoint.objects.get(pk=delivery.endpoint_id).description == "x"
    assert Delivery.objects.get(pk=delivery.pk).last_status_code == 204


def test_nothing_is_written_when_one_statement_fails(delivery, vendor):
    writes = [
        statements.insert(attempt_row(delivery)),
        statements.update_row(Delivery, delivery.pk, {"status": "lost"}),
    ]
    with pytest.raises(IntegrityError), transaction.atomic():
        statements.execute_together(writes)
    assert not DeliveryAttempt.objects.exists()
    assert Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.PENDING


def test_a_statement_that_matches_nothing_returns_zero(delivery, vendor):
    writes = [statements.update_row(Delivery, delivery.pk + 1000, {"replays": 1})]
    assert statements.execute_together(writes) == 0


def test_update_row_writes_only_where_its_guard_holds(delivery, vendor):
    Endpoint.objects.filter(pk=delivery.endpoint_id).update(consecutive_dead=2)
    reset = {"consecutive_dead": 0}
    guard = "consecutive_dead > 2"  # does not hold: nothing is written
    write = statements.update_row(Endpoint, delivery.endpoint_id, reset, guard=guard)
    assert statements.execute_together([write]) == 0
    assert Endpoint.objects.get(pk=delivery.endpoint_id).consecutive_dead == 2
    guard = "consecutive_dead > 1"  # holds
    write = statements.update_row(Endpoint, delivery.endpoint_id, reset, guard=guard)
    assert statements.execute_together([write]) == 1
    assert Endpoint.objects.get(pk=delivery.endpoint_id).consecutive_dead == 0


def test_update_row_converts_values_as_the_orm_does(delivery, vendor):
    when = timezone.now()
    changes = {"last_status_code": None, "last_error": "", "last_attempt_at": when}
    write = statements.update_row(Delivery, delivery.pk, changes)
    assert statements.execute_together([write]) == 1
    saved = Delivery.objects.get(pk=delivery.pk)
    assert (saved.last_status_code, saved.last_attempt_at) == (None, when)


def test_delivery_move_row_moves_only_from_its_sources(delivery, vendor):
    move = delivery_move_row(delivery.pk, DeliveryStatus.DELIVERED, from_=[DeliveryStatus.PENDING])
    assert statements.execute_together([move]) == 1
    assert Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.DELIVERED
    again = delivery_move_row(delivery.pk, DeliveryStatus.DELIVERED, from_=[DeliveryStatus.PENDING])
    assert statements.execute_together([again]) == 0  # no longer pending: a lost race
    with pytest.raises(DeliveryConflict):  # TRANSITIONS has no delivered -> delivered
        delivery_move_row(delivery.pk, DeliveryStatus.DELIVERED, from_=[DeliveryStatus.DELIVERED])


def test_execute_together_needs_a_statement():
    with pytest.raises(ValueError):
        statements.execute_together([])


@pytest.mark.usefixtures("allow_private")
@pytest.mark.parametrize(
    ("status", "outcome", "final", "consecutive_dead"),
    [
        (200, AttemptOutcome.DELIVERED, DeliveryStatus.DELIVERED, 0),
        (503, AttemptOutcome.RETRY, DeliveryStatus.PENDING, 2),
    ],
)
@pytest.mark.parametrize("path", ["postgresql", "other"])
def test_an_attempt_is_recorded_the_same_on_both_paths(
    path, monkeypatch, receiver, status, outcome, final, consecutive_dead
):
    receiver.script("/hook", Reply(status, b"answer"))
    endpoint = services.endpoint_create(url=receiver.url(), topics=["job.dead"])
    Endpoint.objects.filter(pk=endpoint.pk).update(consecutive_dead=2)
    (delivery,) = notify("job.dead", {}).deliveries.all()
    job = job_claim(delivery.job_id, worker="test/1")
    if path != "postgresql":  # only the attempt's record takes the transaction fallback
        monkeypatch.setattr(connection, "vendor", "sqlite")

    assert delivery_attempt(delivery.pk, job=job).outcome == outcome

    delivery.refresh_from_db()
    (attempt,) = delivery.attempts.all()
    assert (attempt.outcome, attempt.status_code, attempt.response_body) == (
        outcome,
        status,
        "answer",
    )
    assert attempt.job_id == job.pk and attempt.address == "127.0.0.1"
    assert delivery.status == final and delivery.last_status_code == status
    assert delivery.last_attempt_at is not None
    assert Endpoint.objects.get(pk=endpoint.pk).consecutive_dead == consecutive_dead
