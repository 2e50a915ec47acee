"""jobs.worker_registry: each worker's own row (alive, gone, stopped), not a run's lease."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import worker_registry
from jobs.models import WorkerHeartbeat
from tests.processes import wait_until


def report(name: str, **fields) -> None:
    defaults = {"queues": ["celery"], "pool": "prefork", "concurrency": 2}
    worker_registry.worker_report(name=name, started_at=timezone.now(), **{**defaults, **fields})


@pytest.mark.django_db
def test_a_report_writes_one_row_and_forgets_workers_gone_a_day():
    gone = timezone.now() - worker_registry.FORGET_AFTER - timedelta(seconds=5)
    kept = timezone.now() - worker_registry.FORGET_AFTER + timedelta(minutes=5)
    for name, seen in (("old@h", gone), ("recent@h", kept)):
        WorkerHeartbeat.objects.create(
            name=name, hostname="h", pid=1, started_at=seen, last_seen_at=seen
        )
    report("w@h")
    report("w@h", concurrency=4)
    row = WorkerHeartbeat.objects.get(name="w@h")
    assert row.concurrency == 4 and row.stopped_at is None
    assert timezone.now() - row.last_seen_at < timedelta(seconds=5)
    assert set(WorkerHeartbeat.objects.values_list("name", flat=True)) == {"w@h", "recent@h"}


def test_gone_means_three_missed_reports(settings):
    settings.CONVEYOR_WORKER_HEARTBEAT = timedelta(seconds=5)
    now = timezone.now()
    assert worker_registry.gone_before(now) == now - timedelta(seconds=15)


def test_a_started_worker_reports_and_a_stopped_one_is_stamped(start_worker):
    worker = start_worker()
    name = f"{worker.name}@"
    row = wait_until(
        lambda: WorkerHeartbeat.objects.filter(name__startswith=name).first(),
        timeout=60,
        message="the worker's row",
    )
    assert row.stopped_at is None and row.concurrency == 2
    worker.stop()
    row.refresh_from_db()
    assert row.stopped_at is not None
