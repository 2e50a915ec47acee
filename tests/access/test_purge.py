"""The idempotency-key purge, with keys on both sides of the 24-hour cutoff."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from project.access import purge as purge_module
from project.access.models import IdempotencyKey
from project.access.purge import KeyPurgeResult, purge_idempotency_keys
from project.access.tasks import purge_idempotency_keys as purge_task
from project.access.tokens import token_create

pytestmark = pytest.mark.django_db


def keys_aged(*ages: timedelta, now) -> None:
    token, _ = token_create(name="ci")
    for number, age in enumerate(ages):
        record = IdempotencyKey.objects.create(
            token=token, key=f"k{number}", path="/x", fingerprint="f"
        )
        IdempotencyKey.objects.filter(pk=record.pk).update(created_at=now - age)


def test_the_purge_deletes_exactly_the_keys_past_24_hours(monkeypatch):
    now = timezone.now()
    keys_aged(
        timedelta(hours=24, minutes=1),  # k0: just past the cutoff
        timedelta(hours=23, minutes=59),  # k1: just inside it
        timedelta(days=3),  # k2
        timedelta(0),  # k3: a request in flight now
        now=now,
    )
    batches = []
    real = purge_module.delete_in_batches

    def counting(queryset, **options):
        batches.append(options["batch_size"])
        return real(queryset, **options)

    monkeypatch.setattr(purge_module, "delete_in_batches", counting)
    assert purge_idempotency_keys(now=now, batch_size=2) == KeyPurgeResult(idempotency_keys=2)
    assert sorted(IdempotencyKey.objects.values_list("key", flat=True)) == ["k1", "k3"]
    assert batches == [2]


def test_the_beat_task_runs_the_purge_every_purge_interval_and_returns_its_counts():
    keys_aged(timedelta(days=2), timedelta(hours=1), now=timezone.now())
    entries = {task: interval for _, task, interval in settings.CONVEYOR_PERIODIC_TASKS}
    assert entries["maintenance.purge_idempotency_keys"] == settings.CONVEYOR_PURGE_INTERVAL
    assert purge_task.name == "maintenance.purge_idempotency_keys" and purge_task.ignore_result
    outcome = purge_task()  # through jobs.maintenance.runs: recorded, with its counts
    assert outcome["ran"] and outcome["counts"] == {"idempotency_keys": 1}
    assert IdempotencyKey.objects.count() == 1
