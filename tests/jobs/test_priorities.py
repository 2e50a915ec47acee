"""Priorities: the database picks the next job — highest priority, then due time, then id."""

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from jobs import services
from jobs.models import Job, JobStatus
from jobs.tasks import noop
from tests.jobtasks import samples, stamp_task
from tests.processes import wait_until

S = JobStatus


@pytest.mark.django_db
@pytest.mark.parametrize("priority", [101, -101, 1.5, "5", True])
def test_a_priority_outside_minus_100_to_100_or_not_an_integer_is_refused(priority):
    with pytest.raises(ValueError, match="priority"):
        services.enqueue("jobs.noop", {}, priority=priority)
    with pytest.raises(ValueError, match="priority"):
        services.enqueue_many("jobs.noop", [{}], priority=priority)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_message_claims_the_best_runnable_job_of_its_queue_and_task():
    now = timezone.now()
    old = now - timedelta(minutes=5)
    low = services.enqueue("jobs.noop", {}, priority=-5)
    later_due = services.enqueue("jobs.noop", {}, priority=7)
    earlier_due = services.enqueue("jobs.noop", {}, priority=7, run_after=old)
    top = services.enqueue("jobs.noop", {}, priority=100)
    other_queue = services.enqueue("jobs.noop", {}, priority=100, queue="emails")
    other_task = services.enqueue("tests.stamp", {"key": "x"}, priority=100)
    order = []
    for _ in range(4):
        noop(low.pk)  # every doorbell names the lowest job; each claims the best one left
        order.append(Job.objects.filter(status=S.SUCCEEDED).exclude(pk__in=order).get().pk)
    assert order == [top.pk, earlier_due.pk, later_due.pk, low.pk]
    noop(low.pk)  # nothing runnable is left in the queue for this task: the doorbell drops
    other = Job.objects.filter(pk__in=[other_queue.pk, other_task.pk])
    assert set(other.values_list("status", flat=True)) == {S.QUEUED}


@pytest.mark.django_db
def test_a_batched_message_claims_as_many_jobs_as_ids_best_first():
    low = [services.enqueue("jobs.noop", {}, priority=0).pk for _ in range(3)]
    high = [services.enqueue("jobs.noop", {}, priority=50).pk for _ in range(2)]
    noop(low[:2])  # two doorbells: the two high jobs run, the low ones wait
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert [statuses[pk] for pk in high] == [S.SUCCEEDED, S.SUCCEEDED]
    assert [statuses[pk] for pk in low] == [S.QUEUED] * 3


@pytest.mark.django_db
def test_celery_and_django_tasks_priorities_are_the_jobs_priority():
    job = stamp_task.apply_async(kwargs={"key": "k"}, priority=42, countdown=60)
    job.refresh_from_db()
    assert (job.task, job.priority, job.payload) == ("tests.stamp", 42, {"key": "k"})
    assert job.run_after > timezone.now() + timedelta(seconds=50)
    assert stamp_task.delay(key="d").priority == 0
    with pytest.raises(ValueError, match="priority"):
        stamp_task.apply_async(kwargs={"key": "k"}, priority=500)


LOW, HIGH = 300, 30


def test_high_priority_jobs_start_before_the_low_backlog(start_worker):
    """One busy worker, 300 low-priority jobs queued, 30 high ones enqueued next: every high
    job starts before any low job still queued then (bar one claim already under way)."""
    key = f"started:{uuid.uuid4().hex}"
    client = samples()
    start_worker(queues="default", concurrency=1)
    lows = services.enqueue_many("tests.stamp", [{"key": key, "sleep": 0.01}] * LOW)
    wait_until(lambda: client.llen(key) >= 20, timeout=60, message="the low backlog to start")
    with transaction.atomic():
        highs = services.enqueue_many(
            "tests.stamp", [{"key": key, "sleep": 0.01}] * HIGH, priority=10
        )
    waiting = set(
        Job.objects.filter(pk__in=[j.pk for j in lows], status=S.QUEUED).values_list(
            "pk", flat=True
        )
    )
    assert len(waiting) > 100  # the backlog is still deep when the high jobs arrive
    wait_until(lambda: client.llen(key) >= LOW + HIGH, timeout=120, message="the drain")
    started = [int(v) for v in client.lrange(key, 0, -1)]
    client.delete(key)
    high_ids = {j.pk for j in highs}
    last_high = max(started.index(pk) for pk in high_ids)
    overtaking = [pk for pk in started[:last_high] if pk in waiting]
    assert len(overtaking) <= 1, f"{len(overtaking)} waiting low jobs started before a high one"
    assert sorted(started) == sorted([j.pk for j in lows] + list(high_ids))
