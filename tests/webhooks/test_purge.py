"""Webhook purge, with fixtures on both sides of the retention cutoff."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from webhooks import services
from webhooks.maintenance import purge as purge_module
from webhooks.maintenance.purge import purge_webhooks
from webhooks.models import AttemptOutcome, Delivery, DeliveryAttempt, DeliveryStatus, Event
from webhooks.tasks import purge_webhooks as purge_task

pytestmark = pytest.mark.django_db
D = DeliveryStatus
NOW = timezone.now()
RETENTION = timedelta(days=30)
OLD = NOW - RETENTION - timedelta(seconds=1)  # just past the cutoff
RECENT = NOW - RETENTION + timedelta(seconds=1)  # just inside it
URL = "https://93.184.215.14/hook"


@pytest.fixture
def endpoint():
    return services.endpoint_create(url=URL, topics=["job.dead"])


def event(created_at) -> Event:
    return Event.objects.create(type="job.dead", body="{}", created_at=created_at)


def delivery(endpoint, status, *, created_at, updated_at=None, attempts=2, of=None) -> Delivery:
    made = Delivery.objects.create(
        event=of or event(created_at),
        endpoint=endpoint,
        status=status,
        created_at=created_at,
        updated_at=updated_at or created_at,
    )
    DeliveryAttempt.objects.bulk_create(
        DeliveryAttempt(
            delivery=made, number=n, started_at=created_at, outcome=AttemptOutcome.RETRY
        )
        for n in range(1, attempts + 1)
    )
    return made


def test_defaults_are_30_days_every_purge_interval():
    assert settings.CONVEYOR_WEBHOOK_RETENTION == RETENTION
    entries = {task: interval for _, task, interval in settings.CONVEYOR_PERIODIC_TASKS}
    assert entries["maintenance.purge_webhooks"] == settings.CONVEYOR_PURGE_INTERVAL


def test_purge_deletes_exactly_the_finished_deliveries_past_retention(endpoint):
    gone = [
        delivery(endpoint, status, created_at=OLD) for status in (D.DELIVERED, D.DEAD, D.SKIPPED)
    ]
    kept = [
        delivery(endpoint, status, created_at=RECENT) for status in (D.DELIVERED, D.DEAD, D.SKIPPED)
    ]
    pending = delivery(endpoint, D.PENDING, created_at=NOW - timedelta(days=365), attempts=3)
    # Created long ago but replayed and finished again recently: its history stays.
    replayed = delivery(endpoint, D.DELIVERED, created_at=OLD, updated_at=RECENT)
    kept += [pending, replayed]

    result = purge_webhooks(now=NOW)

    assert (result.deliveries, result.attempts) == (3, 6)
    assert not Delivery.objects.filter(pk__in=[d.pk for d in gone]).exists()
    assert set(Delivery.objects.values_list("pk", flat=True)) == {d.pk for d in kept}
    assert not DeliveryAttempt.objects.filter(delivery_id__in=[d.pk for d in gone]).exists()
    assert DeliveryAttempt.objects.filter(delivery=pending).count() == 3
    assert DeliveryAttempt.objects.count() == 2 * 4 + 3  # 3 recent + replayed, and pending
    # The events of purged deliveries go with them; those of kept ones stay.
    assert result.events == 3
    assert set(Event.objects.values_list("pk", flat=True)) == {d.event_id for d in kept}


def test_an_old_event_goes_only_once_no_delivery_refers_to_it(endpoint):
    other = services.endpoint_create(url=URL + "/2", topics=["job.dead"])
    shared = event(OLD)
    delivery(endpoint, D.DELIVERED, created_at=OLD, of=shared)
    delivery(other, D.PENDING, created_at=OLD, of=shared)  # still being delivered elsewhere
    orphan_old, orphan_recent = event(OLD), event(RECENT)  # e.g. no endpoint subscribed

    result = purge_webhooks(now=NOW)

    assert (result.deliveries, result.events) == (1, 1)
    assert set(Event.objects.values_list("pk", flat=True)) == {shared.pk, orphan_recent.pk}
    assert not Event.objects.filter(pk=orphan_old.pk).exists()


def test_the_retention_setting_moves_the_cutoff(endpoint, settings):
    settings.CONVEYOR_WEBHOOK_RETENTION = timedelta(days=7)
    week_old = delivery(endpoint, D.DEAD, created_at=NOW - timedelta(days=8))
    fresh = delivery(endpoint, D.DEAD, created_at=NOW - timedelta(days=6))
    assert purge_webhooks(now=NOW).deliveries == 1
    assert list(Delivery.objects.values_list("pk", flat=True)) == [fresh.pk]
    assert week_old.pk != fresh.pk


def test_every_delete_takes_at_most_one_batch_and_the_loop_stops_on_a_short_one(endpoint):
    for _ in range(5):
        delivery(endpoint, D.DELIVERED, created_at=OLD, attempts=3)
    for _ in range(3):
        event(OLD)

    with CaptureQueriesContext(connection) as queries:
        result = purge_webhooks(now=NOW, batch_size=2)

    assert (result.deliveries, result.attempts, result.events) == (5, 15, 8)
    assert not Delivery.objects.exists() and not Event.objects.exists()
    statements = [q["sql"] for q in queries.captured_queries]
    deletes = [sql for sql in statements if "DELETE FROM" in sql]
    # One statement per batch, attempts with their deliveries: delivered 2+2+1, dead 0,
    # skipped 0; then the 8 orphaned events 2+2+2+2+0.
    assert len(deletes) == 10, deletes
    assert all(" LIMIT 2" in sql for sql in deletes), deletes
    assert not [sql for sql in statements if '"webhooks_delivery"."last_error"' in sql]


def test_the_beat_task_runs_the_purge_and_returns_its_counts(endpoint):
    delivery(endpoint, D.DEAD, created_at=NOW - timedelta(days=40))
    assert purge_task.name == "maintenance.purge_webhooks" and purge_task.ignore_result
    outcome = purge_task()  # through jobs.maintenance.runs: recorded, with its counts
    assert outcome["ran"] and outcome["counts"] == {"deliveries": 1, "attempts": 2, "events": 1}
    assert not Delivery.objects.exists()


def test_nothing_to_purge_costs_no_delete(endpoint):
    delivery(endpoint, D.PENDING, created_at=OLD)
    with CaptureQueriesContext(connection) as queries:
        assert purge_module.purge_webhooks(now=NOW) == purge_module.WebhookPurgeResult()
    assert not [q for q in queries.captured_queries if q["sql"].startswith("DELETE")]
