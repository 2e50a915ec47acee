"""notify(): in-app notices, the stored event, and one delivery job per subscribed endpoint."""

import json
from datetime import UTC, datetime

import pytest
from django.db import transaction

from jobs.models import Job, Notification
from webhooks import notify, services
from webhooks.errors import UnknownTopic
from webhooks.models import Delivery, DeliveryStatus, DisabledBy, Endpoint, Event

pytestmark = pytest.mark.django_db


def endpoint(topics, **fields) -> Endpoint:
    created = services.endpoint_create(url="https://93.184.215.14/hook", topics=topics)
    if fields:
        Endpoint.objects.filter(pk=created.pk).update(**fields)
        created.refresh_from_db()
    return created


def test_recipients_get_one_in_app_notice_each(django_user_model):
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    notify(
        "deployment.failed",
        {"title": "demo failed", "message": "step 2 failed", "deployment": 3},
        recipients=[alice, bob.pk, alice],
    )
    notices = Notification.objects.order_by("recipient_id")
    assert [n.recipient_id for n in notices] == [alice.pk, bob.pk]
    assert {(n.topic, n.title, n.body) for n in notices} == {
        ("deployment.failed", "demo failed", "step 2 failed")
    }
    assert notices[0].data["deployment"] == 3


def test_an_unknown_topic_is_refused_and_writes_nothing(django_user_model):
    user = django_user_model.objects.create_user("alice")
    with pytest.raises(UnknownTopic):
        notify("deployment.exploded", {}, recipients=[user])
    with pytest.raises(ValueError):  # UnknownTopic is a ValueError for callers of the stub
        notify("webhook.test", {})
    assert not Notification.objects.exists() and not Event.objects.exists()


def test_each_subscribed_enabled_endpoint_gets_a_delivery_and_a_job():
    first, second = endpoint(["deployment.succeeded"]), endpoint(["deployment.succeeded"])
    endpoint(["deployment.failed"])  # not subscribed
    event = notify("deployment.succeeded", {"deployment": 1})

    deliveries = list(Delivery.objects.filter(event=event).order_by("endpoint_id"))
    assert [d.endpoint_id for d in deliveries] == [first.pk, second.pk]
    assert {d.status for d in deliveries} == {DeliveryStatus.PENDING}
    jobs = Job.objects.filter(task="webhooks.deliver").order_by("id")
    assert [j.payload for j in jobs] == [
        {"delivery_id": d.pk, "endpoint_id": d.endpoint_id} for d in deliveries
    ]
    assert [j.limit_key for j in jobs] == [str(d.endpoint_id) for d in deliveries]
    assert [d.job_id for d in deliveries] == [j.pk for j in jobs]
    assert {(j.queue, j.max_attempts) for j in jobs} == {("webhooks", 6)}


def test_the_event_body_is_the_documented_envelope():
    endpoint(["job.dead"])
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    event = notify("job.dead", {"job_id": 4, "finished_at": when})
    body = json.loads(event.body)
    assert list(body) == ["id", "type", "timestamp", "data"]
    assert body["id"] == event.message_id and event.message_id.startswith("evt_")
    assert body["type"] == "job.dead"
    assert body["timestamp"].endswith("Z")
    assert body["data"] == {"job_id": 4, "finished_at": "2026-01-02T03:04:05Z"}
    assert event.data == body["data"]


def test_an_event_is_stored_even_when_nobody_subscribes():
    event = notify("worktree.pruned", {"path": "/x"})
    assert Event.objects.filter(pk=event.pk).exists()
    assert not Delivery.objects.exists() and not Job.objects.exists()


@pytest.mark.parametrize(
    ("disabled_by", "expected"),
    [
        (DisabledBy.FAILURES, DeliveryStatus.SKIPPED),
        (DisabledBy.GONE, DeliveryStatus.SKIPPED),
        (DisabledBy.MANUAL, None),
    ],
)
def test_a_disabled_endpoint_gets_a_skipped_delivery_only_if_conveyor_disabled_it(
    disabled_by, expected
):
    endpoint(["job.dead"], enabled=False, disabled_by=disabled_by)
    event = notify("job.dead", {"job_id": 1})
    statuses = list(Delivery.objects.filter(event=event).values_list("status", flat=True))
    assert statuses == ([expected] if expected else [])
    assert not Job.objects.exists()


def test_with_webhooks_disabled_there_are_no_event_delivery_or_job_rows(
    settings, django_user_model
):
    settings.CONVEYOR_WEBHOOKS_ENABLED = False
    user = django_user_model.objects.create_user("alice")
    endpoint(["workspace.sync_failed"])
    endpoint(["workspace.sync_failed"], enabled=False, disabled_by=DisabledBy.FAILURES)
    assert notify("workspace.sync_failed", {"workspace": "demo"}, recipients=[user]) is None
    assert Notification.objects.filter(recipient=user).count() == 1
    assert (Event.objects.count(), Delivery.objects.count(), Job.objects.count()) == (0, 0, 0)


def test_notify_writes_in_the_callers_transaction_and_publishes_on_commit(
    django_user_model, django_capture_on_commit_callbacks
):
    user = django_user_model.objects.create_user("alice")
    endpoint(["deployment.created"])
    with pytest.raises(RuntimeError), transaction.atomic():
        notify("deployment.created", {"deployment": 1}, recipients=[user])
        assert Job.objects.count() == 1
        raise RuntimeError("the caller's transaction rolls back")
    assert (Event.objects.count(), Delivery.objects.count(), Job.objects.count()) == (0, 0, 0)
    assert not Notification.objects.exists()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        notify("deployment.created", {"deployment": 2})
    assert len(callbacks) == 1  # one publish of every delivery job, after commit


def test_data_that_is_not_json_is_refused_before_anything_is_written():
    with pytest.raises(TypeError):
        notify("job.dead", {"oops": object()})
    with pytest.raises(TypeError):
        notify("job.dead", ["not", "a", "dict"])
    assert not Event.objects.exists()
