"""Pause and resume, and queue concurrency limits that hold across every worker."""

import subprocess
import time
import uuid

import pytest
from django.core.management import call_command
from django.test import override_settings

from jobs import queues, services
from jobs.maintenance.reaper import reap
from jobs.models import Job, JobStatus
from jobs.tasks import noop
from tests.jobtasks import samples
from tests.processes import PYTHON, ROOT, wait_until

S = JobStatus


@pytest.mark.django_db
def test_no_job_of_a_paused_queue_is_claimed_and_resume_lets_it_run():
    job = services.enqueue("jobs.noop", {})
    other = services.enqueue("jobs.noop", {}, queue="emails")
    queues.pause("default", actor="test")
    noop(job.pk)
    noop(other.pk)  # another queue runs on
    job.refresh_from_db()
    other.refresh_from_db()
    assert (job.status, job.attempts, other.status) == (S.QUEUED, 0, S.SUCCEEDED)
    queues.resume("default", actor="test")
    noop(job.pk)
    job.refresh_from_db()
    assert job.status == S.SUCCEEDED


@pytest.mark.django_db
def test_the_queue_command_pauses_resumes_and_refuses_an_undeclared_queue(capsys):
    call_command("queue", "pause", "deployments")
    assert "deployments" in queues.paused_names()
    call_command("queue", "resume", "deployments")
    assert not queues.paused_names()
    call_command("queue", "list")
    assert "deployments" in capsys.readouterr().out
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="no queue named 'nope'"):
        call_command("queue", "pause", "nope")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "named"),
    [("default=0", "'default=0'"), ("default", "'default'"), ("default=2,default=3", "twice")],
)
def test_a_bad_queue_concurrency_entry_stops_start_up_with_one_line(value, named):
    result = subprocess.run(
        [PYTHON, "manage.py", "check"],
        cwd=ROOT,
        env={**__import__("os").environ, "CONVEYOR_QUEUE_CONCURRENCY": value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "CONVEYOR_QUEUE_CONCURRENCY" in result.stderr and named in result.stderr


@pytest.mark.django_db
def test_a_queue_nobody_declared_in_the_limits_stops_start_up():
    import os

    env = {**os.environ, "CONVEYOR_QUEUE_CONCURRENCY": "nosuchqueue=2"}
    result = subprocess.run(
        [PYTHON, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2 and "'nosuchqueue' is not a declared queue" in result.stderr


@pytest.mark.django_db
@override_settings(CONVEYOR_QUEUE_CONCURRENCY={"default": 1})
def test_a_limited_queue_claims_no_more_than_its_limit_and_spends_no_attempt():
    first, second = (services.enqueue("jobs.noop", {}) for _ in range(2))
    held = services.job_claim(first.pk, worker="w/1")
    assert held is not None
    assert services.job_claim(second.pk, worker="w/2") is None  # the one slot is taken
    waiting = Job.objects.get(pk=second.pk if held.pk == first.pk else first.pk)
    assert (waiting.status, waiting.attempts) == (S.QUEUED, 0)


PAUSE_WINDOW = 8  # seconds


def test_a_paused_queue_starts_nothing_across_a_worker_restart_while_others_run(
    start_worker,
):
    key = f"paused:{uuid.uuid4().hex}"
    client = samples()
    queues.pause("default", actor="test")
    worker = start_worker(queues="default,emails", concurrency=2)
    held = services.enqueue_many("tests.stamp", [{"key": key}] * 20)
    running = services.enqueue_many("tests.stamp", [{"key": f"{key}:emails"}] * 5, queue="emails")
    wait_until(lambda: client.llen(f"{key}:emails") == 5, timeout=60, message="emails to run")
    time.sleep(PAUSE_WINDOW / 2)
    worker.stop()
    start_worker(queues="default,emails", concurrency=2)
    time.sleep(PAUSE_WINDOW / 2)
    assert client.llen(key) == 0
    statuses = Job.objects.filter(pk__in=[j.pk for j in held]).values_list("status", "attempts")
    assert set(statuses) == {(S.QUEUED, 0)}
    queues.resume("default", actor="test")
    wait_until(lambda: client.llen(key) == 20, timeout=60, message="the resumed queue to drain")
    done = Job.objects.filter(pk__in=[j.pk for j in held + running], status=S.SUCCEEDED)
    assert done.count() == 25


LIMIT = 2
LIMITED_ENV = {"CONVEYOR_QUEUE_CONCURRENCY": f"default={LIMIT}", "CONVEYOR_JOB_LEASE_TIMEOUT": "6s"}


def test_a_queue_limit_holds_across_workers_and_a_killed_worker_frees_its_slots(start_worker):
    key = f"running:{uuid.uuid4().hex}"
    client = samples()
    workers = [start_worker(queues="default", concurrency=2, env=LIMITED_ENV) for _ in range(2)]
    jobs = services.enqueue_many("tests.occupy", [{"key": key, "sleep": 0.3}] * 24)
    ids = [job.pk for job in jobs]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, status=S.SUCCEEDED).count() == 24,
        timeout=120,
        message="the limited backlog to drain",
    )
    seen = [int(v) for v in client.lrange(f"{key}:seen", 0, -1)]
    assert max(seen) == LIMIT, seen  # never above the limit, and the limit reached
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}
    # kill -9 a worker while it holds both slots: the reaper frees them within the lease.
    client.delete(key)
    long = services.enqueue_many("tests.occupy", [{"key": key, "sleep": 30}] * 2, max_attempts=1)
    holder = wait_until(
        lambda: (
            set(
                Job.objects.filter(pk__in=[j.pk for j in long], status=S.RUNNING).values_list(
                    "locked_by", flat=True
                )
            )
            if Job.objects.filter(pk__in=[j.pk for j in long], status=S.RUNNING).count() == LIMIT
            else None
        ),
        timeout=60,
        message="both slots to be taken",
    )
    for worker in workers:
        if any(owner.startswith(f"{worker.name}@") for owner in holder):
            worker.kill()
    survivors = [w for w in workers if w.process.poll() is None]
    if not survivors:
        survivors = [start_worker(queues="default", concurrency=2, env=LIMITED_ENV)]
    after = services.enqueue("tests.occupy", {"key": f"{key}:after", "sleep": 0})
    killed_at = time.monotonic()
    with override_settings(CONVEYOR_QUEUE_CONCURRENCY={"default": LIMIT}):
        # As beat would run it: the killed runs end lease_expired and ring for the queue.
        # Each lease runs out on its own renewal's clock: the two may take two reaper runs.
        reaped = []
        wait_until(
            lambda: reaped.append(reap().dead) or sum(reaped) == LIMIT,
            timeout=30,
            interval=0.5,
            message="the reaper",
        )
    wait_until(
        lambda: Job.objects.filter(pk=after.pk, status=S.SUCCEEDED).exists(),
        timeout=30,
        message="a job to start in a freed slot",
    )
    assert time.monotonic() - killed_at < 6 + 10  # the lease, then a moment
    assert set(
        Job.objects.filter(pk__in=[j.pk for j in long]).values_list("reason", flat=True)
    ) == {"lease_expired"}


def test_the_queue_command_run_from_a_shell_answers_on_stdout_and_logs_on_stderr(worker_env):
    """A script reads the answer from stdout: the pause's log line goes to stderr."""
    run = subprocess.run(
        [PYTHON, "manage.py", "queue", "pause", "deployments"],
        cwd=ROOT,
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [run.stdout.strip()]
    assert run.stdout.startswith("deployments") and " paused " in run.stdout
    assert '"event": "queue.pause"' in run.stderr
    assert queues.paused_names() == {"deployments"}
