"""jobs.outcome: one decision for every way a run can end, and its history entry."""

from datetime import timedelta

import pytest
from billiard.exceptions import SoftTimeLimitExceeded
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import batches, outcome, services
from jobs.errors import Permanent, RetryAfter, Snooze
from jobs.models import Job, JobReason, JobStatus
from jobs.tasks import noop
from tests.jobtasks import (
    SIDE_EFFECTS_TABLE,
    awkward_task,
    create_side_effects_table,
    flaky_task,
    side_effect_task,
)

S, R, H = JobStatus, JobReason, outcome.Happened
NOW = timezone.now()


def run(attempts=1, max_attempts=3, cancel=False) -> Job:
    return Job(
        pk=1,
        task="tests.flaky",
        attempts=attempts,
        max_attempts=max_attempts,
        cancel_requested_at=NOW if cancel else None,
    )


@pytest.mark.parametrize(
    ("event", "job", "expected"),
    [
        (outcome.Event.returned("1"), run(), (S.SUCCEEDED, None)),
        (outcome.Event.raised(ConnectionError("x")), run(), (S.RETRYING, R.ERROR)),
        (outcome.Event.raised(ConnectionError("x")), run(3, 3), (S.DEAD, R.EXHAUSTED)),
        (outcome.Event.raised(Permanent("x")), run(), (S.DEAD, R.PERMANENT)),
        (outcome.Event.raised(SystemExit(3)), run(), (S.DEAD, R.PERMANENT)),
        (outcome.Event.raised(KeyboardInterrupt()), run(), (S.DEAD, R.PERMANENT)),
        (outcome.Event.raised(Snooze(30)), run(3, 3), (S.RETRYING, R.SNOOZED)),
        (outcome.Event.raised(SoftTimeLimitExceeded()), run(), (S.RETRYING, R.TIME_LIMIT)),
        (outcome.Event.raised(SoftTimeLimitExceeded()), run(3, 3), (S.DEAD, R.TIME_LIMIT)),
        (outcome.Event.lost(H.WORKER_LOST, "gone"), run(), (S.RETRYING, R.WORKER_LOST)),
        (outcome.Event.lost(H.WORKER_LOST, "gone"), run(3, 3), (S.DEAD, R.WORKER_LOST)),
        (outcome.Event.lost(H.LEASE_EXPIRED, "gone"), run(3, 3), (S.DEAD, R.LEASE_EXPIRED)),
        (outcome.Event.lost(H.WORKER_SHUTDOWN, "bye"), run(3, 3), (S.RETRYING, R.WORKER_SHUTDOWN)),
        # A cancel that was asked for wins over every other ending: it never runs again.
        (outcome.Event.returned("1"), run(cancel=True), (S.CANCELLED, R.CANCELLED)),
        (outcome.Event.lost(H.WORKER_LOST, "gone"), run(cancel=True), (S.CANCELLED, R.CANCELLED)),
        (outcome.Event.lost(H.LEASE_EXPIRED, "x"), run(cancel=True), (S.CANCELLED, R.CANCELLED)),
        (outcome.Event.raised(ValueError("x")), run(cancel=True), (S.CANCELLED, R.CANCELLED)),
    ],
)
def test_decide(event, job, expected):
    decision = outcome.decide(event, job, flaky_task, now=NOW)
    assert (decision.status, decision.reason) == expected


def test_backoff_grows_with_attempts_and_is_capped_by_the_task():
    class Task:
        autoretry_for, dont_autoretry_for = (Exception,), ()
        retry_backoff, retry_backoff_max, retry_jitter = 10, 35, False

    delays = [
        (outcome.decide(outcome.Event.raised(OSError()), run(n, 9), Task, now=NOW).run_after - NOW)
        for n in (1, 2, 3, 4)
    ]
    assert delays == [timedelta(seconds=s) for s in (10, 20, 35, 35)]
    retry_after = outcome.Event.raised(RetryAfter("slow down", seconds=7))
    assert outcome.decide(retry_after, run(4, 9), Task, now=NOW).run_after == NOW + timedelta(
        seconds=7
    )


def test_an_error_the_task_does_not_retry_is_permanent():
    class Task:
        autoretry_for, dont_autoretry_for = (ConnectionError,), ()

    decision = outcome.decide(outcome.Event.raised(ValueError("bad")), run(), Task)
    assert (decision.status, decision.reason) == (S.DEAD, R.PERMANENT)
    assert decision.error["class_path"] == "builtins.ValueError"


@pytest.mark.django_db
def test_the_success_path_is_two_statements_single_and_fewer_than_jobs_batched(monkeypatch):
    """Pinned: a single job is claimed and completed by two statements. A batch is claimed
    a chunk at a time, each chunk's successes written with the next chunk's claim: a batch
    of 5 quick jobs is 3 statements the first time (a chunk of one, until a body's run time
    is known, then a chunk of four) and 2 once it is known."""
    monkeypatch.setattr(batches, "_recent_seconds", {})
    job = services.enqueue("jobs.noop", {})
    with CaptureQueriesContext(connection) as single:
        noop(job.pk)
    # The claim (a WITH … UPDATE that picks the best runnable job) and the end: two UPDATEs.
    assert ["UPDATE" in q["sql"].split() for q in single.captured_queries] == [True, True]
    first = [j.pk for j in services.enqueue_many("jobs.noop", [{} for _ in range(5)])]
    with CaptureQueriesContext(connection) as cold:
        noop(first)
    second = [j.pk for j in services.enqueue_many("jobs.noop", [{} for _ in range(5)])]
    with CaptureQueriesContext(connection) as warm:
        noop(second)
    if connection.vendor == "postgresql":  # SQLite has no UPDATE in WITH: one per success
        assert (len(cold.captured_queries), len(warm.captured_queries)) == (3, 2)
    done = Job.objects.filter(pk__in=[job.pk, *first, *second])
    assert set(done.values_list("status", flat=True)) == {S.SUCCEEDED}
    [entry] = Job.objects.get(pk=second[2]).attempts_history
    assert (entry["attempt"], entry["outcome"], entry["error"]) == (1, "succeeded", None)
    assert entry["worker"].startswith("local/")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("mode", "status", "reason", "message"),
    [
        ("nul_error", S.RETRYING, R.ERROR, "bad\\x00byte"),
        ("unprintable", S.RETRYING, R.ERROR, "<UnprintableError whose str() failed>"),
        ("nul_result", S.DEAD, R.PERMANENT, "the job's result contains a NUL character"),
        ("not_json", S.DEAD, R.PERMANENT, "the job's result cannot be stored as JSON"),
        ("nan_result", S.DEAD, R.PERMANENT, "the job's result cannot be stored as JSON"),
        ("surrogate_result", S.DEAD, R.PERMANENT, "the job's result cannot be stored as JSON"),
        ("surrogate_error", S.RETRYING, R.ERROR, "bad\\udcffbyte"),
    ],
)
def test_awkward_endings_are_recorded_not_left_running(mode, status, reason, message):
    job = services.enqueue("tests.awkward", {"mode": mode})
    awkward_task(job.pk)
    job.refresh_from_db()
    assert (job.status, job.reason) == (status, reason)
    [entry] = job.attempts_history
    assert entry["error"]["message"].startswith(message)
    assert "\x00" not in job.last_error + entry["error"]["traceback"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("mode", "result"), [("cancel_then_return", "finished anyway"), ("cancel_then_raise", None)]
)
def test_a_cancel_that_arrives_while_the_body_runs_always_ends_it_cancelled(mode, result):
    """Whatever the body then does, and whether or not it heard of the cancel."""
    job = services.enqueue("tests.awkward", {"mode": mode}, max_attempts=5)
    awkward_task(job.pk)
    job.refresh_from_db()
    assert (job.status, job.reason, job.result) == (S.CANCELLED, R.CANCELLED, result)
    assert job.attempts_history[-1]["outcome"] == "cancelled"


@pytest.mark.django_db
def test_a_snooze_too_long_to_store_is_cut_to_a_year():
    job = services.enqueue("tests.awkward", {"mode": "snooze_forever"})
    awkward_task(job.pk)
    job.refresh_from_db()
    assert (job.status, job.reason, job.attempts) == (S.RETRYING, R.SNOOZED, 0)
    assert timedelta(days=365) < job.run_after - timezone.now() <= timedelta(days=366)


@pytest.mark.django_db
def test_a_message_of_another_task_claims_nothing():
    job = services.enqueue("tests.awkward", {"mode": "nan_result"})
    noop(job.pk)  # a jobs.noop message carrying the id of a tests.awkward job
    job.refresh_from_db()
    assert (job.status, job.attempts) == (S.QUEUED, 0)


@pytest.mark.django_db
def test_one_unstorable_result_in_a_batch_ends_only_that_job():
    modes = ["size", "nan_result", "size"]
    ids = [services.enqueue("tests.awkward", {"mode": m}).pk for m in modes]
    awkward_task(ids)
    statuses = [Job.objects.get(pk=i).status for i in ids]
    assert statuses == [S.SUCCEEDED, S.DEAD, S.SUCCEEDED]


def test_a_payload_is_a_dict():
    with pytest.raises(ValueError, match="payload is a dict"):
        services.enqueue("jobs.noop", [1, 2, 3])
    with pytest.raises(ValueError, match="payload is a dict"):
        services.enqueue_many("jobs.noop", [{}, "x"])


@pytest.mark.django_db(transaction=True)
def test_an_atomic_body_takes_effect_with_its_success_or_not_at_all():
    from jobs.models import AuditLog
    from tests.jobtasks import atomic_then_cancelled_task

    create_side_effects_table()
    ok = services.enqueue("tests.side_effect", {})
    side_effect_task(ok.pk)
    ok.refresh_from_db()
    assert ok.status == S.SUCCEEDED and ok.result == ok.pk
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT runs FROM {SIDE_EFFECTS_TABLE} WHERE job_id = %s", [ok.pk])
        assert cursor.fetchall() == [(1,)]
    cancelled = services.enqueue("tests.atomic_then_cancelled", {})
    atomic_then_cancelled_task(cancelled.pk)
    cancelled.refresh_from_db()
    assert (cancelled.status, cancelled.reason) == (S.CANCELLED, R.CANCELLED)
    executed = AuditLog.objects.filter(action="test.executed", target_id=str(cancelled.pk))
    assert not executed.exists()  # the body's write went with the refused success
