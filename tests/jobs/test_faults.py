"""Workers die, messages get lost, brokers go away: no job is lost or run twice."""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

from django.test import override_settings

from jobs import services
from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep
from jobs.models import Job, JobStatus
from tests.jobs.test_execution import executions, wait_for_status
from tests.processes import ROOT, RedisServer, wait_until

S = JobStatus
SHORT_LEASE = {"CONVEYOR_JOB_LEASE_TIMEOUT": "10s"}


def child_pid(job: Job) -> int:
    """The pool process that holds ``job``, from its ``locked_by`` (``node/pid``)."""
    return int(job.locked_by.rsplit("/", 1)[1])


def test_killing_the_pool_child_requeues_the_job_at_once(start_worker):
    worker = start_worker(concurrency=1)
    job = services.enqueue("tests.record", {"sleep": 30, "first_only": True})
    wait_for_status(job, S.RUNNING)
    os.kill(child_pid(job), signal.SIGKILL)
    # The parent's task_failure handler re-queues it; no lease expiry is waited for.
    wait_for_status(job, S.SUCCEEDED, timeout=30)
    assert job.attempts == 2
    assert executions(job) == 1
    assert "WorkerLostError" in job.last_error
    lost, ran = job.attempts_history
    assert (lost["outcome"], lost["reason"], ran["outcome"]) == (
        "retrying",
        "worker_lost",
        "succeeded",
    )
    assert lost["error"]["class_path"] == "billiard.exceptions.WorkerLostError"
    assert any(e["job_id"] == job.pk for e in worker.events("job.fail_retry"))


def test_a_job_that_always_kills_its_worker_ends_dead(start_worker):
    start_worker(concurrency=1)
    job = services.enqueue("tests.kill_self", {}, max_attempts=3)
    wait_for_status(job, S.DEAD, timeout=90)
    assert job.attempts == 3
    assert executions(job) == 3
    assert "WorkerLostError" in job.last_error


def test_killing_a_whole_worker_is_recovered_by_the_reaper(start_worker):
    first = start_worker(concurrency=1, env=SHORT_LEASE)
    job = services.enqueue("tests.record", {"sleep": 60, "first_only": True})
    wait_for_status(job, S.RUNNING)
    first.kill()  # parent and child at once: no signal handler runs
    assert reap().retried == 0  # the lease is still live: left alone
    job.refresh_from_db()
    assert job.status == S.RUNNING
    start_worker(concurrency=1, env=SHORT_LEASE)
    wait_until(lambda: reap().retried == 1, timeout=30, interval=0.5, message="the lease to expire")
    wait_for_status(job, S.SUCCEEDED)
    assert job.attempts == 2
    assert executions(job) == 1


@override_settings(CONVEYOR_SWEEPER_GRACE=timedelta(seconds=1))
def test_a_lost_message_is_republished_by_the_sweeper(start_worker, purge_broker):
    job = services.enqueue("tests.record", {})
    purge_broker()  # the message is gone, the row is not
    worker = start_worker(concurrency=1)
    time.sleep(1.5)
    job.refresh_from_db()
    assert job.status == S.QUEUED
    result = sweep()
    assert result.republished == 1
    wait_for_status(job, S.SUCCEEDED)
    assert executions(job) == 1
    assert job.attempts_history[0]["worker"].startswith(f"{worker.name}@")


def test_enqueue_commits_while_the_broker_is_down_and_runs_once_it_is_back(
    worker_env, start_worker
):
    redis = RedisServer()  # a private broker that is not running yet
    env = {**worker_env, "CELERY_BROKER_URL": redis.url, "CONVEYOR_SWEEPER_GRACE": "1s"}
    script = "from jobs import services; print(services.enqueue('tests.record', {}).pk)"
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", f"import tests.jobtasks; {script}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    job = Job.objects.get(pk=int(out.stdout.strip().splitlines()[-1]))
    assert job.status == S.QUEUED
    assert "job.publish_failed" in out.stdout
    assert elapsed < 30, f"enqueue stalled for {elapsed:.1f}s while the broker was down"
    try:
        redis.start()
        start_worker(concurrency=1, env={"CELERY_BROKER_URL": redis.url})
        time.sleep(1.1)
        swept = subprocess.run(
            [sys.executable, "manage.py", "run_maintenance", "sweep"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "republished=1" in swept.stdout, swept.stdout + swept.stderr
        wait_for_status(job, S.SUCCEEDED)
        assert executions(job) == 1
    finally:
        redis.stop()


def test_a_worker_survives_its_database_connections_being_cut(start_worker):
    from django.db import connection

    start_worker(concurrency=1)
    first = services.enqueue("tests.record", {})
    wait_for_status(first, S.SUCCEEDED)
    with connection.cursor() as cursor:  # what a database restart does to the worker
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchone()[0] >= 1
    second = services.enqueue("tests.record", {})
    wait_for_status(second, S.SUCCEEDED, timeout=30)
    assert second.attempts == 1
    assert executions(second) == 1


def enqueue_in_subprocess(env: dict, task: str = "tests.record") -> Job:
    """Enqueue from another process, whose broker is whatever ``env`` says."""
    script = (
        "import tests.jobtasks; from jobs.services import enqueue; "
        f"print(enqueue({task!r}, {{}}).pk)"
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return Job.objects.get(pk=int(out.stdout.strip().splitlines()[-1]))


def test_a_worker_reconnects_after_the_broker_restarts(start_worker, worker_env):
    redis = RedisServer().start()
    env = {**worker_env, "CELERY_BROKER_URL": redis.url}
    try:
        worker = start_worker(concurrency=1, env={"CELERY_BROKER_URL": redis.url})
        before = enqueue_in_subprocess(env)
        wait_for_status(before, S.SUCCEEDED)
        redis.stop()
        time.sleep(1)
        redis.start()  # same port, nothing kept
        after = enqueue_in_subprocess(env)
        wait_for_status(after, S.SUCCEEDED, timeout=90)
        assert executions(after) == 1
        assert worker.process.poll() is None
    finally:
        redis.stop()


def test_a_long_job_keeps_its_lease_without_calling_heartbeat(start_worker):
    start_worker(concurrency=1, env={"CONVEYOR_JOB_LEASE_TIMEOUT": "6s"})
    job = services.enqueue("tests.record", {"sleep": 12})
    wait_for_status(job, S.RUNNING)
    first_lease = job.lease_expires_at
    while job.status == S.RUNNING:  # twice the lease, with the reaper looking every second
        assert reap().retried == 0
        time.sleep(1)
        job.refresh_from_db()
        if job.status == S.RUNNING:
            assert job.lease_expires_at is not None
    assert job.status == S.SUCCEEDED and job.attempts == 1
    assert executions(job) == 1
    assert job.finished_at - job.started_at > (first_lease - job.started_at)  # outlived one lease
