"""jobs.statements: the worker's fixed SQL, run against the real database (PostgreSQL).

Every case reads back what the statement did to the rows, never the SQL text.
"""

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from jobs import attempts, services, statements
from jobs.models import Job, JobReason, JobStatus, QueueState, TaskState

S = JobStatus
TASK = "tests.record"
WORKER = "node/1"


def queued(**fields) -> Job:
    job = services.enqueue(TASK, {})
    if fields:
        Job.objects.filter(pk=job.pk).update(**fields)
        job.refresh_from_db()
    return job


def claimed(**fields) -> Job:
    job = queued(**fields)
    run = statements.claim(job.pk, task=TASK, worker=WORKER, exact=True)
    assert run is not None
    return run


@pytest.fixture(autouse=True)
def _postgresql(db):
    if connection.vendor != "postgresql":
        pytest.skip("these statements are checked on PostgreSQL")


def test_a_claim_takes_the_best_runnable_job_of_the_queue_not_the_one_named():
    now = timezone.now()
    named = queued(priority=0, run_after=now - timedelta(minutes=1))
    older = queued(priority=0, run_after=now - timedelta(minutes=5))
    urgent = queued(priority=5, run_after=now - timedelta(seconds=10))
    first = statements.claim(named.pk, task=TASK, worker=WORKER)
    assert first.pk == urgent.pk  # highest priority first
    second = statements.claim(named.pk, task=TASK, worker=WORKER)
    assert second.pk == older.pk  # then the earliest due
    third = statements.claim(named.pk, task=TASK, worker=WORKER)
    assert third.pk == named.pk
    assert statements.claim(named.pk, task=TASK, worker=WORKER) is None


def test_a_claim_moves_the_row_to_running_counts_the_attempt_and_sets_the_lease(settings):
    settings.CONVEYOR_JOB_LEASE_TIMEOUT = timedelta(minutes=3)
    job = queued(publish_count=4)
    before = timezone.now()
    run = statements.claim(job.pk, task=TASK, worker=WORKER)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.locked_by, row.publish_count) == (
        S.RUNNING,
        job.attempts + 1,
        WORKER,
        0,
    )
    assert before <= row.started_at <= timezone.now()
    assert row.lease_expires_at - row.started_at == timedelta(minutes=3)
    # The returned job is the row as the statement left it, converted like the ORM's.
    assert (run.pk, run.status, run.attempts, run.lease_expires_at) == (
        row.pk,
        row.status,
        row.attempts,
        row.lease_expires_at,
    )
    assert run.payload == row.payload and run.created_at == row.created_at


def test_a_claim_takes_a_job_due_within_the_clock_skew_and_not_one_due_after():
    now = timezone.now()
    skew = statements.CLAIM_CLOCK_SKEW
    later = queued(run_after=now + skew + timedelta(seconds=30))
    assert statements.claim(later.pk, task=TASK, worker=WORKER) is None
    almost = queued(run_after=now + skew / 2)
    assert statements.claim(almost.pk, task=TASK, worker=WORKER).pk == almost.pk


def test_a_claim_leaves_cancelled_other_tasks_and_running_jobs_alone():
    cancelled = queued(cancel_requested_at=timezone.now())
    other = services.enqueue("tests.flaky", {})
    running = claimed()
    mine = queued()
    assert other.queue == mine.queue  # the same queue, another task
    assert statements.claim(mine.pk, task=TASK, worker=WORKER).pk == mine.pk
    assert statements.claim(mine.pk, task=TASK, worker=WORKER) is None
    assert Job.objects.get(pk=cancelled.pk).status == S.QUEUED
    assert Job.objects.get(pk=other.pk).status == S.QUEUED
    assert Job.objects.get(pk=running.pk).attempts == 1  # not claimed twice


def test_an_exact_claim_takes_the_named_job_or_nothing():
    named = queued()
    urgent = queued(priority=9)
    assert statements.claim(named.pk, task=TASK, worker=WORKER, exact=True).pk == named.pk
    assert statements.claim(named.pk, task=TASK, worker=WORKER, exact=True) is None
    assert Job.objects.get(pk=urgent.pk).status == S.QUEUED


def test_a_paused_queue_or_task_is_not_claimed_and_resuming_frees_it():
    job = queued()
    now = timezone.now()
    QueueState.objects.update_or_create(
        name=job.queue, defaults={"paused_at": now, "updated_at": now}
    )
    assert statements.claim(job.pk, task=TASK, worker=WORKER) is None
    QueueState.objects.filter(name=job.queue).update(paused_at=None)
    TaskState.objects.update_or_create(name=TASK, defaults={"paused_at": now, "updated_at": now})
    assert statements.claim(job.pk, task=TASK, worker=WORKER) is None
    TaskState.objects.filter(name=TASK).update(paused_at=None)
    assert statements.claim(job.pk, task=TASK, worker=WORKER).pk == job.pk


def test_a_limited_queue_is_left_to_the_limiter(settings):
    job = queued()
    settings.CONVEYOR_QUEUE_CONCURRENCY = {job.queue: 1}
    assert statements.claim(job.pk, task=TASK, worker=WORKER) is None
    settings.CONVEYOR_QUEUE_CONCURRENCY = {}
    assert statements.claim(job.pk, task=TASK, worker=WORKER).pk == job.pk


@pytest.mark.django_db(transaction=True)
def test_a_claim_skips_a_row_another_transaction_holds():
    held, free = queued(priority=5), queued(priority=0)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=held.pk)
                locked.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert locked.wait(10)
        got = statements.claim(free.pk, task=TASK, worker=WORKER)
        assert got is not None and got.pk == free.pk  # no wait, no error: skipped
    finally:
        release.set()
        thread.join(10)
    assert Job.objects.get(pk=held.pk).status == S.QUEUED


def test_an_end_writes_the_outcome_and_appends_the_attempt():
    run = claimed()
    ending = statements.Ending(status=S.SUCCEEDED, result='{"ok": 1}')
    done = statements.end(run, ending)
    row = Job.objects.get(pk=run.pk)
    assert done is not None and done.status == row.status == S.SUCCEEDED
    assert (row.reason, row.locked_by, row.lease_expires_at) == ("", "", None)
    assert row.result == {"ok": 1} and row.finished_at is not None
    [entry] = row.attempts_history
    assert (entry["attempt"], entry["worker"], entry["outcome"]) == (1, WORKER, S.SUCCEEDED)


@pytest.mark.parametrize("ending", ["end", "one_success", "successes"])
def test_a_run_never_ends_on_record_before_its_start_by_the_databases_clock(monkeypatch, ending):
    """A worker whose clock runs 2 s behind the database's: the claim is stamped with the
    database's clock (statements.CLOCK), and the end written by the worker's clock is never
    earlier than that start, on the row or in its history."""
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() - timedelta(seconds=2))
    runs = [claimed(), claimed()] if ending == "successes" else [claimed()]
    if ending == "end":
        assert statements.end(runs[0], statements.Ending(status=S.DEAD, last_error="boom"))
    else:
        ran = [statements.Success(run, "null", run.started_at, timezone.now()) for run in runs]
        assert statements.end_successes(ran) == {run.pk for run in runs}
    for run in runs:
        row = Job.objects.get(pk=run.pk)
        assert row.started_at > real_now() - timedelta(seconds=1)  # the database's clock
        assert row.finished_at >= row.started_at
        [entry] = row.attempts_history
        assert entry["finished_at"] >= entry["started_at"]


def test_a_retry_with_a_refund_gives_the_attempt_back_and_keeps_the_error():
    run = claimed()
    due = timezone.now() + timedelta(minutes=1)
    ending = statements.Ending(
        status=S.RETRYING,
        reason=JobReason.WORKER_SHUTDOWN,
        last_error="stopping",
        run_after=due,
        refund=True,
        error={"type": "WorkerShutdown", "message": "stopping"},
    )
    before = timezone.now()
    statements.end(run, ending)
    row = Job.objects.get(pk=run.pk)
    assert (row.status, row.reason, row.attempts, row.last_error) == (
        S.RETRYING,
        JobReason.WORKER_SHUTDOWN,
        0,
        "stopping",
    )
    assert row.run_after == due and row.finished_at is None
    assert before <= row.published_at <= timezone.now()  # its retry is published now
    assert row.attempts_history[0]["reason"] == JobReason.WORKER_SHUTDOWN


def test_an_end_not_recorded_leaves_the_history_as_it_was():
    run = claimed()
    due = timezone.now() + timedelta(seconds=30)
    ending = statements.Ending(
        status=S.RETRYING, reason=JobReason.SNOOZED, run_after=due, refund=True, recorded=False
    )
    assert statements.end(run, ending) is not None
    assert Job.objects.get(pk=run.pk).attempts_history == []


@pytest.mark.parametrize(
    "change",
    [{"attempts": 2}, {"locked_by": "node/9"}, {"status": S.QUEUED}],
    ids=["other attempt", "other worker", "not running"],
)
def test_an_end_is_fenced_on_the_run(change):
    run = claimed()
    Job.objects.filter(pk=run.pk).update(**change)
    assert statements.end(run, statements.Ending(status=S.SUCCEEDED)) is None
    row = Job.objects.get(pk=run.pk)
    assert row.status != S.SUCCEEDED and row.attempts_history == []


def test_a_cancel_asked_meanwhile_refuses_every_ending_but_the_cancel():
    run = claimed()
    Job.objects.filter(pk=run.pk).update(cancel_requested_at=timezone.now())
    assert statements.end(run, statements.Ending(status=S.SUCCEEDED)) is None
    cancel = statements.Ending(status=S.CANCELLED, reason=JobReason.CANCELLED, cancels=True)
    assert statements.end(run, cancel).status == S.CANCELLED
    # And a cancel ending without a cancel request is refused.
    other = claimed()
    assert statements.end(other, cancel) is None


def test_the_reapers_guard_ends_only_a_lease_that_expired_before_it():
    run = claimed()
    expires = Job.objects.get(pk=run.pk).lease_expires_at
    dead = statements.Ending(
        status=S.DEAD, reason=JobReason.LEASE_EXPIRED, lease_expired_before=expires
    )
    assert statements.end(run, dead) is None  # renewed meanwhile: not expired before
    later = statements.Ending(
        status=S.DEAD,
        reason=JobReason.LEASE_EXPIRED,
        lease_expired_before=expires + timedelta(microseconds=1),
    )
    assert statements.end(run, later).status == S.DEAD


def success(run: Job, result: str = "1", *, seconds: float = 0.0) -> statements.Success:
    started = timezone.now() - timedelta(seconds=seconds)
    return statements.Success(run, result, started, timezone.now())


def test_a_chunk_of_successes_and_the_next_claim_are_one_statement(django_assert_num_queries):
    first, second = claimed(), claimed()
    ran = [success(first, '{"n": 1}', seconds=2), success(second, '"two"', seconds=1)]
    later = [queued(), queued(), queued()]
    with django_assert_num_queries(1):
        ended, got = statements.end_successes_and_claim(
            ran, later[0].pk, task=TASK, worker=WORKER, count=2
        )
    assert ended == {first.pk, second.pk}
    assert [job.pk for job in got] == [later[0].pk, later[1].pk]  # best first
    assert all(job.status == S.RUNNING for job in got)
    for entry, expected in zip(ran, ({"n": 1}, "two"), strict=True):
        row = Job.objects.get(pk=entry.job.pk)
        assert (row.status, row.result, row.locked_by) == (S.SUCCEEDED, expected, "")
        # the times the body really ran, on the row and in its history entry
        assert (row.started_at, row.finished_at) == (entry.started_at, entry.finished_at)
        [attempt] = attempts.history(row)
        assert (attempt["started_at"], attempt["finished_at"]) == (
            entry.started_at,
            entry.finished_at,
        )
        assert (attempt["outcome"], attempt["worker"], attempt["attempt"]) == (
            S.SUCCEEDED,
            WORKER,
            1,
        )


def test_a_success_refused_by_its_fence_is_left_out_and_the_claim_still_happens():
    mine, taken, cancelled = claimed(), claimed(), claimed()
    Job.objects.filter(pk=taken.pk).update(locked_by="node/2")
    Job.objects.filter(pk=cancelled.pk).update(cancel_requested_at=timezone.now())
    nxt = queued()
    ended, got = statements.end_successes_and_claim(
        [success(mine), success(taken), success(cancelled)],
        nxt.pk,
        task=TASK,
        worker=WORKER,
        count=5,
    )
    assert ended == {mine.pk}
    assert [job.pk for job in got] == [nxt.pk]  # fewer than asked: all there was
    assert Job.objects.get(pk=taken.pk).status == S.RUNNING
    assert Job.objects.get(pk=cancelled.pk).status == S.RUNNING  # the completer cancels it
    # Writing the same successes again ends nothing, and nothing is left to claim.
    assert statements.end_successes_and_claim(
        [success(mine)], nxt.pk, task=TASK, worker=WORKER, count=1
    ) == (set(), [])


def test_renew_leases_extends_only_the_workers_running_jobs_and_reports_cancels(settings):
    settings.CONVEYOR_JOB_LEASE_TIMEOUT = timedelta(minutes=10)
    mine, cancelled, theirs = claimed(), claimed(), claimed()
    Job.objects.filter(pk=cancelled.pk).update(cancel_requested_at=timezone.now())
    Job.objects.filter(pk=theirs.pk).update(locked_by="node/2")
    before = timezone.now()
    answer = statements.renew_leases([mine.pk, cancelled.pk, theirs.pk], worker=WORKER)
    assert answer == {mine.pk: False, cancelled.pk: True}
    for pk in (mine.pk, cancelled.pk):
        lease = Job.objects.get(pk=pk).lease_expires_at
        assert before + timedelta(minutes=10) <= lease <= timezone.now() + timedelta(minutes=10)
    assert Job.objects.get(pk=theirs.pk).lease_expires_at == theirs.lease_expires_at
    assert statements.renew_leases([], worker=WORKER) == {}


def test_queue_of():
    job = queued()
    assert statements.queue_of(job.pk) == job.queue
    assert statements.queue_of(job.pk + 10_000) is None
