"""Batched doorbells and run endings with real workers on PostgreSQL + Redis."""

import os
import random
import signal
import time

from django.db import connection

from jobs import publish, services
from jobs.models import Job, JobReason, JobStatus
from tests.jobs.test_execution import executions, wait_for_status
from tests.jobs.test_faults import child_pid
from tests.jobtasks import SIDE_EFFECTS_TABLE, create_side_effects_table
from tests.processes import wait_until

S = JobStatus


def side_effects(ids: list[int]) -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job_id, runs FROM {SIDE_EFFECTS_TABLE}")
        return {job_id: runs for job_id, runs in cursor.fetchall() if job_id in set(ids)}


def test_enqueue_many_shares_messages_and_a_single_enqueue_does_not(transactional_db):
    jobs = services.enqueue_many("tests.side_effect", [{} for _ in range(400)])
    messages = publish.messages(jobs)
    assert len(messages) == 16 and all(len(ids) == 25 for _, _, ids, _ in messages)
    assert len(publish.messages(jobs[:20])) == 20  # a small fan-out stays spread out
    assert len(publish.messages(services.enqueue_many("deployments.run", [{}] * 400))) == 400


def test_kill_9_mid_batch_loses_nothing_and_runs_nothing_twice(start_worker):
    """Pool children are killed at random moments while batches run; the unclaimed jobs of
    a lost batch are recovered at once (no sweeper runs here), and no body that finished
    runs again."""
    create_side_effects_table()
    start_worker(concurrency=2)
    jobs = services.enqueue_many("tests.side_effect", [{"sleep": 0.02} for _ in range(800)])
    ids = [job.pk for job in jobs]
    kills = 0
    rng = random.Random(7)
    while kills < 6:
        time.sleep(rng.uniform(0.5, 1.5))
        running = Job.objects.filter(pk__in=ids, status=S.RUNNING).first()
        if running is None:
            if not Job.objects.filter(pk__in=ids).exclude(status=S.SUCCEEDED).exists():
                break
            continue
        try:
            os.kill(child_pid(running), signal.SIGKILL)
            kills += 1
        except ProcessLookupError:
            pass
    assert kills >= 3, "the batch finished before enough kills"

    def drained():
        return Job.objects.filter(pk__in=ids, status=S.SUCCEEDED).count() == len(ids)

    wait_until(drained, timeout=300, interval=0.5, message="every job to succeed")
    effects = side_effects(ids)
    assert len(effects) == len(ids), "a job was lost"
    assert set(effects.values()) == {1}, "a finished body ran twice"
    lost = Job.objects.filter(pk__in=ids, reason=JobReason.WORKER_LOST)
    assert not lost.exists()  # succeeded jobs carry no reason; the loss is in the history
    retried = [j for j in Job.objects.filter(pk__in=ids, attempts=2)]
    assert len(retried) >= 1
    assert all(j.attempts_history[0]["reason"] == "worker_lost" for j in retried)


def test_a_raising_job_in_a_batch_retries_alone(start_worker):
    create_side_effects_table()
    start_worker(concurrency=2)
    payloads = [{"fail_first": i == 137} for i in range(400)]
    jobs = services.enqueue_many("tests.side_effect", payloads)
    ids = [job.pk for job in jobs]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status=S.SUCCEEDED).count() == len(ids),
        timeout=300,
        interval=0.5,
        message="every job to succeed",
    )
    attempts = dict(Job.objects.filter(pk__in=ids).values_list("pk", "attempts"))
    assert attempts.pop(ids[137]) == 2
    assert set(attempts.values()) == {1}
    assert set(side_effects(ids).values()) == {1}
    failed, ok = Job.objects.get(pk=ids[137]).attempts_history
    assert failed["error"]["class_path"] == "builtins.ValueError"
    assert "fails its first attempt" in failed["error"]["traceback"]
    assert (failed["outcome"], ok["outcome"]) == ("retrying", "succeeded")


def test_a_job_cancelled_while_running_never_runs_again_after_its_worker_dies(start_worker):
    start_worker(concurrency=1)
    job = services.enqueue("tests.record", {"sleep": 30}, max_attempts=5)
    wait_for_status(job, S.RUNNING)
    services.job_cancel(job.pk, actor="operator")  # the body never checks: it sleeps on
    os.kill(child_pid(job), signal.SIGKILL)
    wait_for_status(job, S.CANCELLED, timeout=30)
    assert job.reason == JobReason.CANCELLED
    time.sleep(2)  # had it been re-queued, a free worker would run it now
    job.refresh_from_db()
    assert job.status == S.CANCELLED and job.attempts == 1
    assert executions(job) == 0  # the body was killed mid-sleep, before recording


def test_every_attempt_is_kept_three_failures_then_success(start_worker):
    worker = start_worker(concurrency=1)
    job = services.enqueue("tests.flaky", {"fail_runs": 3}, max_attempts=5)
    wait_for_status(job, S.SUCCEEDED, timeout=60)
    history = job.attempts_history
    assert [e["attempt"] for e in history] == [1, 2, 3, 4]
    assert [e["outcome"] for e in history] == ["retrying"] * 3 + ["succeeded"]
    assert [e["reason"] for e in history] == ["error"] * 3 + [""]
    for number, entry in enumerate(history[:3], start=1):
        assert entry["error"]["class_path"] == "builtins.ConnectionError"
        assert entry["error"]["message"] == f"transient failure on attempt {number}"
        assert "raise ConnectionError" in entry["error"]["traceback"]
        assert entry["worker"].startswith(f"{worker.name}@")
        assert entry["started_at"] <= entry["finished_at"]
    assert history[3]["error"] is None


def test_a_backlog_of_another_tasks_messages_covers_a_job_for_32_graces_at_most(
    transactional_db, purge_broker
):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.maintenance.sweeper import sweep
    from project.celery import app

    now = timezone.now()
    lost = services.enqueue("tests.record", {})  # its doorbell lost with a killed worker
    recent = services.enqueue("tests.record", {})
    purge_broker()
    Job.objects.filter(pk=lost.pk).update(  # the longest spacing, 32 × 1m, has passed
        run_after=now - timedelta(minutes=40), published_at=now - timedelta(minutes=33)
    )
    Job.objects.filter(pk=recent.pk).update(
        run_after=now - timedelta(minutes=10), published_at=now - timedelta(minutes=10)
    )
    with app.producer_or_acquire() as producer:  # another task's backlog in the same queue
        for _ in range(5):
            app.send_task("tests.side_effect", args=[[0]], queue="default", producer=producer)
    result = sweep()
    assert (result.republished, result.skipped_backlog) == (1, 1)
    assert Job.objects.get(pk=lost.pk).publish_count == 1
    assert Job.objects.get(pk=recent.pk).publish_count == 0


def test_the_sweeper_counts_a_batched_backlog_as_covered(transactional_db, purge_broker):
    from datetime import timedelta

    from django.test import override_settings
    from django.utils import timezone

    from jobs.maintenance.sweeper import sweep
    from project.celery import app

    long_ago = timezone.now() - timedelta(minutes=10)
    jobs = services.enqueue_many("tests.side_effect", [{} for _ in range(30)])
    purge_broker()  # every doorbell lost
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(
        run_after=long_ago, published_at=long_ago
    )
    with app.producer_or_acquire() as producer:  # two messages still waiting in the queue
        for _ in range(2):
            app.send_task("tests.side_effect", args=[[0]], queue="default", producer=producer)
    with override_settings(CONVEYOR_BATCH_SIZE=25):
        assert sweep().skipped_backlog == 30  # 2 messages can carry 50 ids
    purge_broker()
    with override_settings(CONVEYOR_BATCH_SIZE=25):
        result = sweep()
    assert result.republished == 30 and result.skipped_backlog == 0
    with app.connection_for_write() as conn:
        depth = conn.default_channel.queue_declare(queue="default", passive=True).message_count
    assert depth == len(publish.messages(jobs)) == 30  # 30 jobs: fewer than 16 per message


def test_an_atomic_body_killed_after_its_write_leaves_no_trace_and_runs_once(start_worker):
    """Both sides: the same body killed between its write and its recorded success writes
    twice when it is not atomic, once when it is."""
    create_side_effects_table()
    start_worker(concurrency=1)
    atomic = services.enqueue("tests.side_effect", {"die_after_write": True})
    plain = services.enqueue("tests.side_effect_at_least_once", {"die_after_write": True})
    for job in (atomic, plain):
        wait_for_status(job, S.SUCCEEDED, timeout=60)
        assert job.attempts == 2
        assert job.attempts_history[0]["reason"] == "worker_lost"
    assert side_effects([atomic.pk, plain.pk]) == {atomic.pk: 1, plain.pk: 2}
