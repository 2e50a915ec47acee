"""jobs.accounting.rollup: the last minutes recomputed from finished_at, idempotent, expiring."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.accounting import rollup
from jobs.models import Job, JobMinuteStats, JobStatus

pytestmark = pytest.mark.django_db


def ended(*, at, run: float, wait: float, status=JobStatus.SUCCEEDED, task="tests.record"):
    job = services.enqueue(task, {})
    started = at - timedelta(seconds=run)
    Job.objects.filter(pk=job.pk).update(
        status=status,
        run_after=started - timedelta(seconds=wait),
        started_at=started,
        finished_at=at,
    )
    return job


def test_a_refresh_recomputes_only_its_window_and_is_idempotent():
    now = timezone.now().replace(second=30, microsecond=0)
    inside = now.replace(second=5) - timedelta(minutes=rollup.REFRESH_MINUTES - 1)
    outside = inside - timedelta(seconds=10)
    ended(at=inside, run=0.2, wait=4)
    ended(at=inside, run=20, wait=0.004, status=JobStatus.DEAD)
    ended(at=outside, run=1, wait=1)
    first = rollup.refresh(now=now)
    assert first.rows == 2
    rows = {row.status: row for row in JobMinuteStats.objects.all()}
    ok = rows[JobStatus.SUCCEEDED]
    assert ok.minute == inside.replace(second=0) and ok.count == 1
    # Cumulative buckets: 0.2 s is above 0.1 and within 0.25; 4 s is within 5, not 2.5.
    bounds = list(rollup.RUN_TIME_BOUNDS)
    assert ok.run_time_buckets[bounds.index(0.1)] == 0
    assert ok.run_time_buckets[bounds.index(0.25)] == 1 and ok.run_time_buckets[-1] == 1
    assert ok.wait_time_buckets[bounds.index(2.5)] == 0
    assert ok.wait_time_buckets[bounds.index(5)] == 1
    assert ok.run_time_sum == pytest.approx(0.2) and ok.wait_time_max == pytest.approx(4)
    assert rows[JobStatus.DEAD].run_time_max == pytest.approx(20)

    # Again: the same rows, not twice as many; a late job in the window is picked up.
    ended(at=inside + timedelta(seconds=20), run=0.2, wait=4)
    again = rollup.refresh(now=now)
    assert again.rows == 2 and JobMinuteStats.objects.count() == 2
    assert JobMinuteStats.objects.get(status=JobStatus.SUCCEEDED).count == 2


def test_rows_past_the_retention_go_and_those_within_it_stay():
    now = timezone.now()
    for age in (rollup.RETENTION + timedelta(minutes=1), rollup.RETENTION - timedelta(minutes=5)):
        JobMinuteStats.objects.create(
            minute=(now - age).replace(second=0, microsecond=0),
            queue="default",
            task="tests.record",
            status=JobStatus.SUCCEEDED,
            count=1,
        )
    assert rollup.refresh(now=now).expired == 1
    [kept] = JobMinuteStats.objects.all()
    assert now - kept.minute < rollup.RETENTION
