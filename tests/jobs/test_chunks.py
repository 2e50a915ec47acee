"""A batch message's chunks (jobs.batches), run in-process against the real database: a
chunk that overruns gives back what it has not started, and successes not yet written keep
their leases while a later body of the chunk runs."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection

from jobs import attempts, batches, queues, services
from jobs.lease import keeper
from jobs.maintenance.reaper import reap
from jobs.models import AuditLog, Job, JobStatus
from tests.jobtasks import record_task

S = JobStatus
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _quick_bodies(monkeypatch):
    """This process has seen the task's bodies run in no time: a whole message is a chunk."""
    monkeypatch.setattr(batches, "_recent_seconds", {"tests.record": 1e-4})


def _after(seconds: float, action) -> threading.Thread:
    def run():
        time.sleep(seconds)
        try:
            action()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_chunk_that_overruns_gives_back_the_jobs_it_has_not_started():
    jobs = [services.enqueue("tests.record", {"sleep": 0.5, "n": n}) for n in range(6)]
    # paused while the first body runs: what is given back is not started here again
    pausing = _after(0.2, lambda: queues.pause("default", actor="test"))
    try:
        started = time.monotonic()
        record_task([job.pk for job in jobs])  # one message, one chunk of six
        elapsed = time.monotonic() - started
        pausing.join()
        rows = list(Job.objects.filter(pk__in=[job.pk for job in jobs]).order_by("pk"))
        assert [row.status for row in rows] == [S.SUCCEEDED] + [S.QUEUED] * 5
        assert elapsed < 2.5  # one body ran here (0.5 s), not six
        for row in rows[1:]:  # given back whole: no attempt spent, no history, no holder
            assert (row.attempts, row.attempts_history, row.locked_by) == (0, [], "")
            assert row.started_at is None and row.lease_expires_at is None
        [entry] = attempts.history(rows[0])
        assert entry["outcome"] == S.SUCCEEDED
    finally:
        queues.resume("default", actor="test")


def test_a_job_whose_cancel_was_asked_for_while_it_waited_in_its_chunk_is_cancelled():
    """Given back with the request, it would stay queued for good: no claim takes a job
    whose cancel was asked for."""
    jobs = [services.enqueue("tests.record", {"sleep": 0.5, "n": n}) for n in range(3)]
    asked = _after(0.2, lambda: services.job_cancel(jobs[1].pk, actor="test"))
    pausing = _after(0.25, lambda: queues.pause("default", actor="test"))  # so it overruns
    try:
        record_task([job.pk for job in jobs])
        asked.join()
        pausing.join()
        rows = list(Job.objects.filter(pk__in=[job.pk for job in jobs]).order_by("pk"))
        assert [row.status for row in rows] == [S.SUCCEEDED, S.CANCELLED, S.QUEUED]
        assert rows[1].attempts == 0 and rows[1].finished_at is not None
        assert not AuditLog.objects.filter(
            action="test.executed", target_id=str(jobs[1].pk)
        ).exists()
    finally:
        queues.resume("default", actor="test")


def test_successes_not_yet_written_keep_their_leases_while_the_chunk_runs(settings):
    settings.CONVEYOR_JOB_LEASE_TIMEOUT = timedelta(seconds=5)
    sleeps = [0, 0, 7]  # the third body outlives the lease the first two were claimed with
    jobs = [services.enqueue("tests.record", {"sleep": s, "n": n}) for n, s in enumerate(sleeps)]
    reaped = []
    # the keeper's own timer runs every third of the lease; here it is rung once, mid-way
    renewal = _after(3.0, lambda: keeper().renew())
    reaper = _after(6.0, lambda: reaped.append(reap()))
    record_task([job.pk for job in jobs])
    renewal.join()
    reaper.join()
    rows = list(Job.objects.filter(pk__in=[job.pk for job in jobs]).order_by("pk"))
    assert [(row.status, row.attempts) for row in rows] == [(S.SUCCEEDED, 1)] * 3
    assert reaped and all(len(attempts.history(row)) == 1 for row in rows)
