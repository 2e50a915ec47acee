"""Reaper and purge, with fixtures on both sides of every cutoff."""

import time
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from django_celery_results.models import TaskResult

from jobs.maintenance import purge as purge_module
from jobs.maintenance.purge import purge
from jobs.maintenance.reaper import reap
from jobs.models import AuditLog, Job, JobReason, JobStatus

S = JobStatus
pytestmark = pytest.mark.usefixtures("purge_broker")


def make(status, **fields) -> Job:
    now = timezone.now()
    defaults = {"run_after": now, "created_at": now, "updated_at": now}
    return Job.objects.create(task="tests.record", status=status, **{**defaults, **fields})


@contextmanager
def held_by_another_transaction(job_id: int):
    """Hold the job's row in another transaction meanwhile, and check that nothing in the
    block waited for it (a statement that did fails after 10 s instead of hanging)."""
    from django.db import connection, connections

    holder = connections.create_connection("default")
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [job_id])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '10s'")
        started = time.monotonic()
        yield
        assert time.monotonic() - started < 10  # nothing waited for the row
    finally:
        holder.rollback()
        holder.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")


@pytest.mark.django_db
def test_reaper_recovers_expired_leases_and_leaves_live_ones():
    now = timezone.now()
    live = make(
        S.RUNNING, attempts=1, lease_expires_at=now + timedelta(seconds=30), locked_by="w/1"
    )
    expired = make(
        S.RUNNING,
        attempts=1,
        max_attempts=3,
        lease_expires_at=now - timedelta(seconds=1),
        locked_by="w/2",
    )
    spent = make(
        S.RUNNING,
        attempts=3,
        max_attempts=3,
        lease_expires_at=now - timedelta(seconds=1),
        locked_by="w/3",
    )
    result = reap()
    assert (result.retried, result.dead) == (1, 1)
    for job in (live, expired, spent):
        job.refresh_from_db()
    assert live.status == S.RUNNING and live.locked_by == "w/1"
    assert expired.status == S.RETRYING and expired.reason == JobReason.LEASE_EXPIRED
    assert expired.lease_expires_at is None and expired.locked_by == ""
    assert spent.status == S.DEAD and spent.finished_at is not None
    assert spent.reason == JobReason.LEASE_EXPIRED
    [entry] = spent.attempts_history
    assert (entry["attempt"], entry["worker"], entry["outcome"]) == (3, "w/3", "dead")
    assert entry["reason"] == "lease_expired" and entry["error"]["message"].startswith("lease")
    assert AuditLog.objects.filter(action="job.dead", target_id=str(spent.pk)).exists()
    assert reap() == type(result)(retried=0, dead=0)


@pytest.mark.django_db
def test_reaper_cancels_an_expired_run_whose_cancel_was_requested():
    """A cancelled job never runs again, even when its worker died before it could stop."""
    now = timezone.now()
    job = make(
        S.RUNNING,
        attempts=1,
        max_attempts=5,
        lease_expires_at=now - timedelta(seconds=1),
        locked_by="w/9",
        cancel_requested_at=now - timedelta(seconds=30),
    )
    assert reap().cancelled == 1
    job.refresh_from_db()
    assert (job.status, job.reason) == (S.CANCELLED, JobReason.CANCELLED)
    assert job.attempts_history[-1]["outcome"] == "cancelled"


@pytest.mark.django_db
@override_settings(
    CONVEYOR_PURGE_COMPLETED_RETENTION=timedelta(days=7),
    CONVEYOR_PURGE_DEAD_RETENTION=timedelta(days=30),
)
def test_purge_deletes_exactly_the_rows_past_their_retention(monkeypatch):
    now = timezone.now()
    minute = timedelta(minutes=1)
    old_completed = now - timedelta(days=7) - minute
    young_completed = now - timedelta(days=7) + minute
    old_dead = now - timedelta(days=30) - minute
    young_dead = now - timedelta(days=30) + minute
    doomed = [make(S.SUCCEEDED, finished_at=old_completed) for _ in range(5)]
    doomed += [make(S.CANCELLED, finished_at=old_completed), make(S.DEAD, finished_at=old_dead)]
    kept = [
        make(S.SUCCEEDED, finished_at=young_completed),
        make(S.CANCELLED, finished_at=young_completed),
        make(S.DEAD, finished_at=old_completed),  # dead rows keep longer
        make(S.DEAD, finished_at=young_dead),
        make(S.QUEUED, finished_at=None, created_at=old_dead),
        make(S.RETRYING, finished_at=None, created_at=old_dead),
    ]
    TaskResult.objects.create(task_id="old", status="SUCCESS")
    TaskResult.objects.filter(task_id="old").update(date_done=now - timedelta(days=8))
    TaskResult.objects.create(task_id="young", status="SUCCESS")

    batches = []
    real = purge_module.delete_in_batches

    def counting(queryset, **options):
        batches.append(options["batch_size"])
        return real(queryset, **options)

    monkeypatch.setattr(purge_module, "delete_in_batches", counting)
    result = purge(batch_size=2)
    assert (result.completed, result.dead, result.task_results) == (6, 1, 1)
    assert set(Job.objects.values_list("pk", flat=True)) == {j.pk for j in kept}
    assert not Job.objects.filter(pk__in=[j.pk for j in doomed]).exists()
    assert list(TaskResult.objects.values_list("task_id", flat=True)) == ["young"]
    assert batches == [2] * 6  # succeeded, cancelled, dead, results, limit keys, workflows


def test_the_sweeper_reads_an_empty_or_missing_queue_as_empty(transactional_db, purge_broker):
    """Redis deletes a queue's key when it empties: depth 0, not unknown (which would make
    the sweeper re-send regardless and log a warning on every pass)."""
    from jobs.maintenance.sweeper import _queue_depth
    from jobs.services import enqueue

    purge_broker()
    assert _queue_depth("default") == 0
    assert _queue_depth("conveyor-no-such-queue") == 0
    enqueue("tests.record", {})  # no worker is running: the message waits
    assert _queue_depth("default") == 1


def test_the_sweeper_reads_only_the_columns_it_needs_and_still_publishes_each_job(
    transactional_db, purge_broker
):
    """No payload, history or result leaves the database, and no deferred field is fetched."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from jobs.maintenance.sweeper import sweep
    from project.celery import app

    long_ago = timezone.now() - timedelta(minutes=10)
    soon = timezone.now() + timedelta(minutes=28)  # came within the 30-minute horizon lately
    overdue = [
        make(S.QUEUED, run_after=long_ago, payload={"big": "x" * 1000}),
        make(S.RETRYING, run_after=long_ago, attempts=2, attempts_history=[{"attempt": 1}]),
    ]
    # Beyond the horizon when published, now within it: published with its countdown.
    coming = make(S.QUEUED, run_after=soon, published_at=soon - timedelta(hours=1))
    # Crossed into it 25 minutes ago, while no sweeper ran: left to the overdue re-send.
    missed = make(
        S.QUEUED,
        run_after=timezone.now() + timedelta(minutes=5),
        published_at=timezone.now() - timedelta(minutes=55),
    )
    purge_broker()

    with CaptureQueriesContext(connection) as queries:
        result = sweep()

    assert (result.republished, result.scheduled) == (2, 1)
    reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip("(").startswith("SELECT") and '"jobs_job"' in q["sql"]
    ]
    assert len(reads) == 2, reads  # the overdue and the coming-due rows; no per-job fetch
    for sql in reads:
        for column in ("payload", "attempts_history", "result", "last_error"):
            assert f'"jobs_job"."{column}"' not in sql, sql
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        assert channel.queue_declare(queue="default", passive=True).message_count == 3
    published = Job.objects.filter(pk__in=[j.pk for j in [*overdue, coming]])
    assert all(job.published_at is not None for job in published)
    assert [j.publish_count for j in published.order_by("pk")] == [1, 1, 1]
    assert Job.objects.get(pk=missed.pk).publish_count == 0


def test_the_sweeper_cancels_a_waiting_job_whose_cancel_was_asked_for(
    transactional_db, purge_broker, caplog
):
    """No claim takes such a row (a run given back to the queue just as its cancel was asked
    for): the sweeper cancels it as an operator's cancel of a waiting job would, and rings
    for it no more."""
    from jobs.maintenance.sweeper import sweep
    from jobs.signals import job_cancelled
    from project.celery import app

    long_ago = timezone.now() - timedelta(minutes=10)
    stranded = make(S.QUEUED, run_after=long_ago, attempts=1, cancel_requested_at=long_ago)
    waiting = make(S.QUEUED, run_after=long_ago)
    signalled = []

    def record(sender, job, actor, **kwargs):
        signalled.append((job.pk, actor))

    job_cancelled.connect(record)
    try:
        result = sweep()
    finally:
        job_cancelled.disconnect(record)
    assert (result.cancelled, result.republished) == (1, 1)
    row = Job.objects.get(pk=stranded.pk)
    assert (row.status, row.reason, row.publish_count) == (S.CANCELLED, JobReason.CANCELLED, 0)
    assert row.finished_at is not None
    assert Job.objects.get(pk=waiting.pk).publish_count == 1
    assert signalled == [(stranded.pk, "sweeper")]
    assert [r.actor for r in caplog.records if r.getMessage() == "job.cancelled"] == ["sweeper"]
    with app.connection_for_write() as conn:  # the waiting job's doorbell only
        assert conn.default_channel.queue_declare(queue="default", passive=True).message_count == 1


def test_a_failing_cancel_leaves_the_sweepers_re_sends_alone(
    transactional_db, purge_broker, caplog
):
    """A cancel that fails (here a receiver of job_cancelled raising) is logged and left for
    the next sweep; the lost doorbells of the same sweep still go out."""
    from jobs.maintenance.sweeper import sweep
    from jobs.signals import job_cancelled

    long_ago = timezone.now() - timedelta(minutes=10)
    stranded = make(S.QUEUED, run_after=long_ago, attempts=1, cancel_requested_at=long_ago)
    lost = make(S.QUEUED, run_after=long_ago)

    def refuse(sender, **kwargs):
        raise RuntimeError("a receiver that fails")

    job_cancelled.connect(refuse)
    try:
        result = sweep()
    finally:
        job_cancelled.disconnect(refuse)
    assert (result.republished, result.cancelled) == (1, 0)
    assert Job.objects.get(pk=lost.pk).publish_count == 1
    assert Job.objects.get(pk=stranded.pk).status == S.QUEUED  # rolled back whole
    assert [r for r in caplog.records if r.getMessage() == "sweeper.cancel_failed"]
    assert sweep().cancelled == 1
    assert Job.objects.get(pk=stranded.pk).status == S.CANCELLED


def test_the_sweepers_cancel_passes_over_a_row_another_transaction_holds(
    transactional_db, purge_broker
):
    """It does not wait for the row (as the re-sends do not); the next sweep cancels it."""
    from jobs.maintenance.sweeper import sweep

    long_ago = timezone.now() - timedelta(minutes=10)
    stranded = make(S.QUEUED, run_after=long_ago, attempts=1, cancel_requested_at=long_ago)
    with held_by_another_transaction(stranded.pk):
        assert sweep().cancelled == 0
    assert sweep().cancelled == 1


def test_the_sweeper_leaves_a_job_claimed_after_it_was_read(
    transactional_db, purge_broker, monkeypatch
):
    """Its row is not touched (a worker ending it holds it) and it gets no doorbell."""
    from jobs.maintenance import sweeper
    from project.celery import app

    long_ago = timezone.now() - timedelta(minutes=10)
    claimed, waiting = make(S.QUEUED, run_after=long_ago), make(S.QUEUED, run_after=long_ago)
    read = sweeper._candidates

    def read_then_claimed(now):
        found = list(read(now))
        Job.objects.filter(pk=claimed.pk).update(status=S.RUNNING, locked_by="w/1")
        return found

    monkeypatch.setattr(sweeper, "_candidates", read_then_claimed)
    assert sweeper.sweep().republished == 1
    counts = dict(Job.objects.values_list("pk", "publish_count"))
    assert counts == {claimed.pk: 0, waiting.pk: 1}
    with app.connection_for_write() as conn:
        assert conn.default_channel.queue_declare(queue="default", passive=True).message_count == 1


def test_the_sweeper_passes_over_a_row_another_transaction_holds(transactional_db, purge_broker):
    """It neither waits for the row (a wait while holding the rows it counted could close a
    circle of waits) nor rings for it; the next sweep, the row free, does."""
    from jobs.maintenance import sweeper

    long_ago = timezone.now() - timedelta(minutes=10)
    held, free = make(S.QUEUED, run_after=long_ago), make(S.QUEUED, run_after=long_ago)
    with held_by_another_transaction(held.pk):
        assert sweeper.sweep().republished == 1
    counts = dict(Job.objects.values_list("pk", "publish_count"))
    assert counts == {held.pk: 0, free.pk: 1}


@pytest.mark.django_db
def test_the_sweeper_spaces_re_sends_exponentially_on_both_sides_of_each_step():
    from jobs import conf
    from jobs.maintenance.sweeper import MAX_BACKOFF_DOUBLINGS, _candidates

    now = timezone.now()
    grace = conf.get().sweeper_grace
    overdue = now - grace - timedelta(minutes=1)
    due, early = [make(S.QUEUED, run_after=overdue, published_at=None)], []
    for count in range(MAX_BACKOFF_DOUBLINGS + 2):  # the last step repeats past the cap
        spacing = grace * 2 ** min(count, MAX_BACKOFF_DOUBLINGS)
        for published, side in ((now - spacing - SECOND, due), (now - spacing + SECOND, early)):
            status = S.RETRYING if count % 2 else S.QUEUED
            side.append(
                make(status, run_after=overdue, published_at=published, publish_count=count)
            )
    make(S.QUEUED, run_after=now, published_at=None)  # not overdue yet

    assert sorted(job.pk for job in _candidates(now)) == sorted(job.pk for job in due)


SECOND = timedelta(seconds=1)
