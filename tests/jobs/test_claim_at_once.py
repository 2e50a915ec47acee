"""A limited claim in one message (jobs.claim_at_once): the same decisions as the limiter's
statement-at-a-time path, taken under the lock, with no client round trip inside it."""

import itertools
import logging
import random
import threading
import time
from datetime import timedelta

import pytest
from django.db import DataError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from jobs import claim_at_once, completer, conf, limiter, queues, services, statements, task_states
from jobs.limits import Limit
from jobs.models import Job, JobStatus, QueueState, TaskState

S = JobStatus
PATHS = {
    # the statement-at-a-time path, as SQLite and limits with rates take it
    "limiter": lambda plan, job_id, worker, count: limiter.claim_reading_holds(
        plan, job_id, task="jobs.noop", worker=worker, count=count
    )[0],
    "at_once": lambda plan, job_id, worker, count: (
        claim_at_once.claim(plan, job_id, task="jobs.noop", worker=worker, count=count).jobs
    ),
}


def _states():
    queues.ensure_states()
    task_states.ensure_states()


def _chunk_that_ran(*, enqueued: int, ran: int):
    """Under a limit that doesn't bind: ``enqueued`` jobs, the first ``ran`` claimed by w/1
    and run; return the plan, the jobs, the claimed runs and their successes."""
    _states()
    plan = limiter.Plan(limit=Limit(concurrency=50))
    jobs = [services.enqueue("jobs.noop", {}) for _ in range(enqueued)]
    running = limiter.claim_reading_holds(
        plan, jobs[0].pk, task="jobs.noop", worker="w/1", count=ran
    )[0]
    now = timezone.now()
    return plan, jobs, running, [statements.Success(job, "null", now, now) for job in running]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_chunk_under_a_slot_limit_is_cut_and_marked_the_same_way_on_both_paths(path):
    _states()
    claim = PATHS[path]
    plan = limiter.Plan(limit=Limit(concurrency=12))
    jobs = [services.enqueue("jobs.noop", {}) for _ in range(14)]
    with transaction.atomic():
        assert [j.pk for j in claim(plan, jobs[0].pk, "w/1", 1)] == [jobs[0].pk]
    taken = []
    for worker in ("w/2", "w/3", "w/4", "w/5", "w/6", "w/7", "w/8", "w/9"):
        with transaction.atomic():
            taken.append([j.pk for j in claim(plan, jobs[0].pk, worker, 5)])
    # 11 free: a chunk of 5; 6 free: one at a time, the rest left to other workers; full
    assert taken[0] == [j.pk for j in jobs[1:6]] and taken[1] == [jobs[6].pk]
    assert [len(t) for t in taken[2:]] == [1, 1, 1, 1, 1, 0]
    assert Job.objects.filter(status=S.RUNNING).count() == 12
    assert TaskState.objects.get(name="jobs.noop").held_at is not None  # a slot will ring
    assert QueueState.objects.get(name="default").held_at is None


@pytest.mark.django_db(transaction=True)
@override_settings(CONVEYOR_QUEUE_CONCURRENCY={"default": 2})
def test_a_queue_limit_refuses_the_third_and_marks_the_queue_not_the_task():
    _states()
    plan = limiter.Plan(queue_limit=2)
    jobs = [services.enqueue("jobs.noop", {}) for _ in range(3)]
    first = claim_at_once.claim(plan, jobs[0].pk, task="jobs.noop", worker="w/1", count=5)
    assert [j.pk for j in first.jobs] == [jobs[0].pk]  # 2 free: not twice the chunk, one
    assert first.locked and not first.queue_held and first.queue == "default"
    assert len(claim_at_once.claim(plan, jobs[0].pk, task="jobs.noop", worker="w/2").jobs) == 1
    refused = claim_at_once.claim(plan, jobs[0].pk, task="jobs.noop", worker="w/3")
    assert refused.jobs == [] and refused.locked
    assert QueueState.objects.get(name="default").held_at is not None
    assert TaskState.objects.get(name="jobs.noop").held_at is None
    again = claim_at_once.claim(plan, jobs[0].pk, task="jobs.noop", worker="w/3")
    assert again.queue_held  # the lock read the mark the refusal left


@pytest.mark.django_db(transaction=True)
def test_a_paused_queue_or_task_starts_nothing_and_marks_nothing():
    _states()
    plan = limiter.Plan(limit=Limit(concurrency=5))
    job = services.enqueue("jobs.noop", {})
    for model, name in ((QueueState, "default"), (TaskState, "jobs.noop")):
        model.objects.filter(name=name).update(paused_at=timezone.now())
        claimed = claim_at_once.claim(plan, job.pk, task="jobs.noop", worker="w/1")
        assert claimed.jobs == [] and claimed.locked
        model.objects.filter(name=name).update(paused_at=None)
    assert not TaskState.objects.filter(held_at__isnull=False).exists()
    assert not QueueState.objects.filter(held_at__isnull=False).exists()
    assert claim_at_once.claim(plan, job.pk, task="jobs.noop", worker="w/1").jobs == [job]


@pytest.mark.django_db(transaction=True)
def test_per_key_slots_refuse_a_busy_tenant_and_mark_the_task():
    _states()
    plan = limiter.Plan(limit=Limit(key=("tenant",), key_concurrency=1))
    a = services.enqueue("jobs.noop", {"tenant": "a"})
    a2 = services.enqueue("jobs.noop", {"tenant": "a"})
    Job.objects.filter(pk__in=[a.pk, a2.pk]).update(limit_key="a")
    assert claim_at_once.claim(plan, a.pk, task="jobs.noop", worker="w/1", count=5).jobs == [a]
    assert TaskState.objects.get(name="jobs.noop").held_at is None
    assert claim_at_once.claim(plan, a2.pk, task="jobs.noop", worker="w/2").jobs == []
    assert TaskState.objects.get(name="jobs.noop").held_at is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(
    ("queue_limit", "concurrency"), [(None, None), (5, None), (None, 5), (5, 5)]
)
def test_a_key_limited_claim_that_finds_nothing_due_marks_nothing(path, queue_limit, concurrency):
    """A doorbell whose job another claim took finds nothing: no key held anything back, so
    no end has to ring for it. (Marked, every end rang an extra doorbell while a backlog
    lasted, and each of those dropped one more: 1.6 dropped doorbells a webhook delivery.)"""
    _states()
    claim = PATHS[path]
    limit = Limit(key=("tenant",), key_concurrency=1, concurrency=concurrency)
    plan = limiter.Plan(queue_limit=queue_limit, limit=limit)
    a = services.enqueue("jobs.noop", {"tenant": "a"})
    later = timezone.now() + timedelta(hours=1)
    b = services.enqueue("jobs.noop", {"tenant": "b"}, run_after=later)
    Job.objects.filter(pk=a.pk).update(limit_key="a")
    Job.objects.filter(pk=b.pk).update(limit_key="b")
    with transaction.atomic():
        assert [j.pk for j in claim(plan, a.pk, "w/1", 1)] == [a.pk]
    with transaction.atomic():  # a's doorbell again, late; b is not due yet
        assert claim(plan, a.pk, "w/2", 1) == []
    assert TaskState.objects.get(name="jobs.noop").held_at is None
    cancelled = services.enqueue("jobs.noop", {"tenant": "c"})
    Job.objects.filter(pk=cancelled.pk).update(limit_key="c", cancel_requested_at=timezone.now())
    with transaction.atomic():  # due but its cancel asked for: no claim takes it, no mark
        assert claim(plan, a.pk, "w/3", 1) == []
    assert TaskState.objects.get(name="jobs.noop").held_at is None
    a2 = services.enqueue("jobs.noop", {"tenant": "a"})
    Job.objects.filter(pk=a2.pk).update(limit_key="a")
    with transaction.atomic():  # due, but key "a" runs 1 of 1: held back, so marked
        assert claim(plan, a2.pk, "w/4", 1) == []
    assert TaskState.objects.get(name="jobs.noop").held_at is not None
    assert QueueState.objects.get(name="default").held_at is None


@pytest.mark.django_db(transaction=True)
def test_a_missing_state_row_is_made_and_the_claim_still_happens():
    plan = limiter.Plan(limit=Limit(concurrency=5))
    job = services.enqueue("jobs.noop", {})
    TaskState.objects.filter(name="jobs.noop").delete()
    assert claim_at_once.claim(plan, job.pk, task="jobs.noop", worker="w/1").locked is False
    assert Job.objects.get(pk=job.pk).status == S.QUEUED  # nothing claimed without the lock
    assert limiter.claim(plan, job.pk, task="jobs.noop", worker="w/1") == job  # made, claimed
    assert TaskState.objects.filter(name="jobs.noop").exists()


@pytest.mark.django_db(transaction=True)  # autocommit, as in a worker: BEGIN/COMMIT counted
def test_a_limited_chunks_successes_and_next_claim_are_one_message_and_one_transaction():
    plan, jobs, running, ran = _chunk_that_ran(enqueued=9, ran=3)
    # this connection prepares the lock and the pick (jobs.prepared) with a first claim
    warm = claim_at_once.claim(plan, jobs[0].pk, task="jobs.noop", worker="w/0", count=3)
    assert sorted(job.pk for job in warm.jobs) == [job.pk for job in jobs[3:6]]
    with CaptureQueriesContext(connection) as queries:
        settled, claimed = completer.succeed_many_and_claim(
            ran, jobs[0].pk, 3, plan=plan, task="jobs.noop", worker="w/1"
        )
    assert len(queries.captured_queries) == 1  # no BEGIN, no COMMIT: one implicit transaction
    sql = queries.captured_queries[0]["sql"]
    assert sql.count("EXECUTE conveyor_") == 2  # the lock and the pick, prepared
    assert "UPDATE jobs_job" in sql  # the successes, as text
    assert [job.pk for job, ok in settled if ok] == [job.pk for job in running]
    assert sorted(job.pk for job in claimed) == [job.pk for job in jobs[6:9]]
    assert Job.objects.filter(status=S.SUCCEEDED).count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_prepared_lock_or_pick_the_server_lost_is_sent_again_as_text_and_nothing_is_lost():
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    plan, jobs, running, ran = _chunk_that_ran(enqueued=9, ran=3)
    claim_at_once.claim(plan, jobs[0].pk, task="jobs.noop", worker="w/0", count=3)  # prepares
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # as a pooler's DISCARD ALL would
    with CaptureQueriesContext(connection) as queries:
        settled, claimed = completer.succeed_many_and_claim(
            ran, jobs[0].pk, 3, plan=plan, task="jobs.noop", worker="w/1"
        )
    sent = [query["sql"] for query in queries]
    assert "EXECUTE conveyor_" in sent[0]  # the first try, rolled back by the server
    assert "EXECUTE" not in sent[-1] and "FOR UPDATE OF t" in sent[-1]  # again, as text
    assert [job.pk for job, ok in settled if ok] == [job.pk for job in running]
    assert sorted(job.pk for job in claimed) == [job.pk for job in jobs[6:9]]
    assert Job.objects.filter(status=S.SUCCEEDED).count() == 3  # written once


def _claim_while_the_task_row_is_held(claim, meanwhile, *sql_with_it):
    """Run ``claim()`` in a thread while another transaction holds the task's state row
    (and ran ``sql_with_it``, (sql, params) pairs); once the claim waits for the row, call
    ``meanwhile()``, commit, and return what the claim returned."""
    holder = connections.create_connection("default")
    answer = {}

    def run():
        try:
            answer["claimed"] = claim()
        finally:
            connection.close()

    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {statements.TASK_STATE_TABLE} WHERE name = %s FOR UPDATE",
                ["jobs.noop"],
            )
            for sql, params in sql_with_it:
                cursor.execute(sql, params)
        claiming = threading.Thread(target=run)
        claiming.start()
        claiming.join(1)
        assert claiming.is_alive()  # it waits for the lock
        meanwhile()
        holder.commit()
        claiming.join(30)
    finally:
        holder.close()
    return answer["claimed"]


@pytest.mark.django_db(transaction=True)
def test_the_count_is_read_after_the_lock_so_a_claim_committed_meanwhile_is_counted():
    """A claim waiting on the lock counts, once granted, the run whose claim held it: the pick
    is a statement of its own, its snapshot taken after the lock (were the count taken with
    the lock, in one statement, it would miss that run and exceed the limit)."""
    _states()
    plan = limiter.Plan(limit=Limit(concurrency=1))
    first, second = (services.enqueue("jobs.noop", {}) for _ in range(2))
    claimed = _claim_while_the_task_row_is_held(
        lambda: claim_at_once.claim(plan, second.pk, task="jobs.noop", worker="w/1"),
        lambda: None,
        (
            f"UPDATE {statements.TABLE} SET status = 'running', locked_by = 'w/0' WHERE id = %s",
            [first.pk],
        ),
    )
    assert claimed.jobs == []  # the run committed meanwhile fills the one slot
    assert Job.objects.get(pk=second.pk).status == S.QUEUED
    assert TaskState.objects.get(name="jobs.noop").held_at is not None


def _in_a_transaction(call):
    with transaction.atomic():
        return call()


CLAIMS_THAT_WAIT = {
    # a limited claim in one message, and statement at a time: they wait for the row's lock
    "at_once": lambda job_id: (
        claim_at_once.claim(
            limiter.Plan(limit=Limit(concurrency=1)), job_id, task="jobs.noop", worker="w/1"
        ).jobs
    ),
    "limiter": lambda job_id: _in_a_transaction(
        lambda: limiter.claim_reading_holds(
            limiter.Plan(limit=Limit(concurrency=1)), job_id, task="jobs.noop", worker="w/1"
        )[0]
    ),
    # the plain claim reads the row under FOR KEY SHARE: it waits for a pause's FOR UPDATE
    "plain": lambda job_id: [statements.claim(job_id, task="jobs.noop", worker="w/1")],
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", sorted(CLAIMS_THAT_WAIT))
def test_a_claim_that_waited_for_the_lock_starts_after_the_run_that_ended_meanwhile(path):
    """The claim's time is the database's as the claim runs, not the worker's when it sent
    it: a run that ended while the claim waited ended before the claimed run started, and
    the lease counts from that start."""
    _states()
    job = services.enqueue("jobs.noop", {})
    ended = {}
    sent = timezone.now()
    claimed = _claim_while_the_task_row_is_held(
        lambda: CLAIMS_THAT_WAIT[path](job.pk),
        lambda: ended.setdefault("at", timezone.now()),
    )
    [run] = claimed
    assert run.started_at >= ended["at"] > sent + timedelta(milliseconds=500)
    assert run.updated_at == run.started_at
    assert run.lease_expires_at == run.started_at + conf.get().lease_timeout
    assert Job.objects.get(pk=job.pk).started_at == run.started_at


def _old_path(plan, job_id, worker, count, only):
    with transaction.atomic():
        jobs, holds = limiter._claim(plan, job_id, "jobs.noop", worker, only, count)
    return [j.pk for j in jobs], holds


def _one_message(plan, job_id, worker, count, only):
    claimed = claim_at_once.claim(
        plan, job_id, task="jobs.noop", worker=worker, count=count, only=only
    )
    assert claimed.locked
    holds = limiter.Holds(claimed.queue, claimed.queue_held, claimed.task_held)
    return [j.pk for j in claimed.jobs], holds


@pytest.mark.django_db(transaction=True)
def test_both_paths_decide_the_same_over_every_mix_of_limits_pauses_and_chunks(caplog):
    """The one message against the statement-at-a-time path, step by step: the same jobs
    claimed, the same rows running, the same marks, over queue limits, task and key
    concurrency, pauses, chunk sizes and exact claims (the order of the positional
    parameters is where they could drift apart). Every variant of the lock and the pick
    prepares (jobs.prepared): none falls back to text."""
    caplog.set_level(logging.WARNING, logger="jobs")
    queues.ensure_states(["default", "other"])
    task_states.ensure_states()
    rng = random.Random(7)
    jobs = [services.enqueue("jobs.noop", {}) for _ in range(16)]
    elsewhere = services.enqueue("jobs.noop", {}, queue="other")  # the task, another queue
    ids = [job.pk for job in jobs] + [elsewhere.pk]
    for job in jobs:
        Job.objects.filter(pk=job.pk).update(
            limit_key=rng.choice("abc"), priority=rng.randint(0, 2)
        )
    mixes = itertools.product(
        [None, 1, 3, 7], [None, 1, 4, 9], [None, 1, 2], ["", "queue", "task"], [1, 3], [0, 1]
    )
    compared = 0
    for queue_limit, concurrency, key_concurrency, paused, count, exact in mixes:
        if not (queue_limit or concurrency or key_concurrency) or rng.random() < 0.5:
            continue  # half of the mixes, the same half every run
        limit = None
        if concurrency or key_concurrency:
            key = ("tenant",) if key_concurrency else None
            limit = Limit(concurrency=concurrency, key=key, key_concurrency=key_concurrency)
        plan = limiter.Plan(queue_limit=queue_limit, limit=limit)
        running = rng.sample(ids[:16], rng.randint(0, 6)) + [elsewhere.pk]
        steps = [rng.choice(ids[:16]) for _ in range(5)]
        seen = {}
        for name, path in (("limiter", _old_path), ("one message", _one_message)):
            Job.objects.filter(pk__in=ids).update(status=S.QUEUED, locked_by="", attempts=0)
            Job.objects.filter(pk__in=running).update(status=S.RUNNING, locked_by="before")
            QueueState.objects.update(held_at=None, paused_at=None)
            TaskState.objects.update(held_at=None, paused_at=None)
            if paused == "queue":
                QueueState.objects.filter(name="default").update(paused_at=timezone.now())
            elif paused == "task":
                TaskState.objects.filter(name="jobs.noop").update(paused_at=timezone.now())
            seen[name] = []
            for step, job_id in enumerate(steps):
                claimed = path(plan, job_id, f"w/{step}", count, job_id if exact else None)
                rows = Job.objects.filter(pk__in=ids).order_by("pk")
                seen[name].append(
                    (
                        claimed,
                        list(rows.values_list("status", "locked_by")),
                        QueueState.objects.get(name="default").held_at is not None,
                        TaskState.objects.get(name="jobs.noop").held_at is not None,
                    )
                )
        assert seen["limiter"] == seen["one message"], (queue_limit, concurrency, paused)
        compared += 1
    assert compared > 100
    assert "job.prepared_statements_off" not in caplog.messages
    assert connection._conveyor_prepared[1]  # the names prepared on this connection


@pytest.mark.django_db(transaction=True)
def test_a_job_claimed_without_the_lock_is_given_back_and_the_limiter_claims_it(monkeypatch):
    """The lock reads no task state row, but one is made before the pick's snapshot (another
    worker starting): the pick claims without the lock. That claim is given back untouched,
    and the limiter's own path (which makes missing rows) claims the job."""
    queues.ensure_states()
    plan = limiter.Plan(limit=Limit(concurrency=1))
    first = services.enqueue("jobs.noop", {})
    TaskState.objects.filter(name="jobs.noop").delete()
    slow_lock = statements.limited_lock_sql
    monkeypatch.setattr(  # the time between the two statements, made long
        statements,
        "limited_lock_sql",
        lambda *args: slow_lock(*args).replace(
            "WHERE j.id = %s", "WHERE j.id = %s AND (SELECT true FROM pg_sleep(1))"
        ),
    )
    answer = {}

    def claim():
        try:
            answer["job"] = limiter.claim(plan, first.pk, task="jobs.noop", worker="w/A")
        finally:
            connection.close()

    claiming = threading.Thread(target=claim)
    claiming.start()
    time.sleep(0.4)
    task_states.ensure_states(["jobs.noop"])
    claiming.join(30)
    assert answer["job"] == first
    row = Job.objects.get(pk=first.pk)
    assert (row.status, row.locked_by, row.attempts) == (S.RUNNING, "w/A", 1)


@pytest.mark.django_db(transaction=True)
def test_a_job_moved_while_its_claim_waits_leaves_the_claim_in_the_queue_it_locked():
    """The pick takes its queue from the lock's statement, not from the named job again: a
    job moved to another queue meanwhile (deployments' routing) does not make it count,
    claim or mark in a queue whose row it does not hold."""
    queues.ensure_states(["default", "other"])
    task_states.ensure_states()
    plan = limiter.Plan(queue_limit=1)
    named = services.enqueue("jobs.noop", {})
    waiting = services.enqueue("jobs.noop", {})
    for _ in range(2):
        services.enqueue("jobs.noop", {}, queue="other")
    claimed = _claim_while_the_task_row_is_held(
        lambda: claim_at_once.claim(plan, named.pk, task="jobs.noop", worker="w/1"),
        lambda: Job.objects.filter(pk=named.pk).update(status=S.RUNNING, queue="other"),
    )
    assert claimed.queue == "default" and [job.pk for job in claimed.jobs] == [waiting.pk]
    assert not QueueState.objects.filter(held_at__isnull=False).exists()
    assert Job.objects.filter(queue="other", status=S.RUNNING).count() == 1  # the moved one


@pytest.mark.django_db(transaction=True)
def test_a_failing_message_writes_nothing_and_leaves_the_connection_usable(monkeypatch):
    plan, jobs, _, ran = _chunk_that_ran(enqueued=4, ran=2)
    claim_at_once._pick_sql.cache_clear()
    monkeypatch.setattr(claim_at_once, "RUNNING", f"{claim_at_once.RUNNING} AND 1 / 0 = 1")
    try:
        with pytest.raises(DataError):
            completer.succeed_many_and_claim(
                ran, jobs[0].pk, 2, plan=plan, task="jobs.noop", worker="w/1"
            )
    finally:
        monkeypatch.undo()
        claim_at_once._pick_sql.cache_clear()
    assert Job.objects.filter(status=S.RUNNING).count() == 2  # the successes rolled back
    assert connection.connection.info.transaction_status.name == "IDLE"
    assert not connection.in_atomic_block and connection.get_autocommit()
    assert claim_at_once.claim(plan, jobs[2].pk, task="jobs.noop", worker="w/2").jobs


@pytest.mark.django_db(transaction=True)
def test_server_side_binding_takes_the_statement_at_a_time_path(monkeypatch):
    _states()
    plan = limiter.Plan(limit=Limit(concurrency=5))
    assert claim_at_once.applies(plan)
    assert not claim_at_once.applies(limiter.Plan(limit=Limit(rate="5/s")))
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {"server_side_binding": True})
    assert not claim_at_once.applies(plan)
