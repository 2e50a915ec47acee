"""The hard-time-limit recovery thread (jobs.lost_runs): which runs it ends."""

import contextlib
import subprocess
import threading

import pytest

from jobs import completer, lost_runs, services
from jobs.models import Job, JobStatus
from jobs.services import job_claim
from project.celery import app

S = JobStatus
NODE = "celery@hostile"


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def running(task: str) -> Job:
    job = services.enqueue(task, {})
    return job_claim(job.pk, worker=f"{NODE}/{dead_pid()}")


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(lost_runs, "SETTLE_SECONDS", 2.0)
    monkeypatch.setattr(lost_runs, "POLL_SECONDS", 0.01)


def recover(task, job, event=None):
    from jobs import outcome

    event = event or outcome.Event.lost(outcome.Happened.TIME_LIMIT, "TimeLimitExceeded: 2", None)
    lost_runs._recover_after_kill(task, [job.pk], event, lost_runs._node_runs(NODE))


@pytest.mark.django_db(transaction=True)
def test_two_children_past_their_limit_at_once_both_runs_are_ended(fast, monkeypatch):
    """Two pool children of one node hit the hard limit together: both runs are ended."""
    task = app.tasks["tests.over_time_limit"]
    first, second = running(task.name), running(task.name)
    # Both children were killed before either thread's poll: both threads see both runs gone.
    barrier = threading.Barrier(2, timeout=5)
    real = completer.finish

    def finish(decision, job, **kw):
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        return real(decision, job, **kw)

    monkeypatch.setattr(completer, "finish", finish)
    threads = [threading.Thread(target=recover, args=(task, j)) for j in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    statuses = dict(Job.objects.filter(pk__in=[first.pk, second.pk]).values_list("pk", "status"))
    assert statuses == {first.pk: S.RETRYING, second.pk: S.RETRYING}, statuses


@pytest.mark.parametrize("other_first", [True, False])
@pytest.mark.django_db(transaction=True)
def test_the_run_ended_for_a_time_limit_is_the_time_limited_tasks_own(fast, other_first):
    """A gone run of another task on this node (a child OOM-killed, or a run left by the
    node's previous incarnation under the same name) is not the timed-out one."""
    task = app.tasks["tests.over_time_limit"]
    if other_first:
        other = running("tests.record")  # e.g. an earlier worker of this node name, kill -9'd
        timed_out = running(task.name)
    else:
        timed_out = running(task.name)
        other = running("tests.record")

    recover(task, timed_out)

    other.refresh_from_db()
    timed_out.refresh_from_db()
    assert (timed_out.status, other.status) == (S.RETRYING, S.RUNNING), (
        f"timed-out run: {timed_out.status}; other task's run: {other.status} "
        f"({other.attempts_history[-1:] if other.attempts_history else ''})"
    )
