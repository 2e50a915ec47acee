"""The last two members of a chord end at the same moment: the callback is released once.

Two threads, each on its own database connection, record the ends of the last two members.
A third connection holds the callback's row lock meanwhile, so both ends are written (and
their edges marked done) before either may look at the callback: the tightest interleaving,
where each sees the other's end uncommitted. The design (lock, then a new statement that
sees every committed end) must release the callback exactly once.
"""

import logging
import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from jobs import completer, outcome, services, statements, workflows
from jobs.models import Job, JobStatus
from jobs.workflows.release import in_one_message
from tests.processes import wait_until
from tests.workflows.conftest import enqueue

S = JobStatus
pytestmark = pytest.mark.django_db(transaction=True)


def _waiting_on_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def _finish(job: Job) -> None:
    """A run's end as a single message writes it: in an atomic block, step by step."""
    with transaction.atomic():
        completer.finish(outcome.Decision(S.SUCCEEDED, result="1"), job)


def _succeed_in_one_message(job: Job) -> None:
    """A chunk's successes as a batch writes them: the end, the edges' mark and lock and the
    "ready?" question in one message of an explicit transaction (release.end_and_advance)."""
    assert in_one_message()
    completer.succeed_many([statements.Success(job, "1", job.started_at, timezone.now())])


def _end(end, job: Job, errors: list) -> None:
    try:
        end(job)
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)
    finally:
        connection.close()


def _hold_lock(job_id: int, locked: threading.Event, release: threading.Event) -> None:
    try:
        with transaction.atomic():
            Job.objects.select_for_update().filter(pk=job_id).first()
            locked.set()
            release.wait(timeout=30)
    finally:
        connection.close()


@pytest.mark.parametrize("end", [_finish, _succeed_in_one_message])
def test_two_last_members_racing_release_the_callback_exactly_once(end, caplog):
    caplog.set_level(logging.INFO, logger="jobs")
    for _ in range(3):
        caplog.clear()
        flow = enqueue(
            workflows.chord(
                [("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 2})], ("tests.wf.collect", {})
            )
        )
        first, second, callback = Job.objects.filter(workflow=flow).order_by("id")
        claimed = [
            services.job_claim(first.pk, worker="race/1"),
            services.job_claim(second.pk, worker="race/2"),
        ]
        assert all(claimed)
        locked, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold_lock, args=(callback.pk, locked, release))
        holder.start()
        assert locked.wait(timeout=10)
        errors: list = []
        enders = [threading.Thread(target=_end, args=(end, job, errors)) for job in claimed]
        for thread in enders:
            thread.start()
        # Both ends are written and both wait for the callback's lock: neither has committed.
        wait_until(lambda: _waiting_on_locks() >= 2, timeout=10, message="both ends to wait")
        release.set()
        for thread in [holder, *enders]:
            thread.join(timeout=30)
        assert not errors
        callback.refresh_from_db()
        assert callback.status == S.QUEUED
        assert [m["status"] for m in callback.payload["members"]] == ["succeeded"] * 2
        released = [r for r in caplog.records if r.getMessage() == "workflow.released"]
        assert len(released) == 1


def test_without_a_race_the_last_end_releases_and_the_first_does_not():
    flow = enqueue(
        workflows.chord(
            [("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 2})], ("tests.wf.collect", {})
        )
    )
    first, second, callback = Job.objects.filter(workflow=flow).order_by("id")
    for job in (first, second):
        claimed = services.job_claim(job.pk, worker="solo/1")
        completer.finish(outcome.Decision(S.SUCCEEDED, result="1"), claimed)
        callback.refresh_from_db()
        assert callback.status == (S.QUEUED if job is second else S.WAITING)


def test_a_workflow_cancel_and_a_members_end_at_once_do_not_deadlock():
    """The cancel locks the workflow's unfinished rows in id order, as ends do (their own row,
    then their dependants'). Here it waits on the first member, held elsewhere, while a chunk
    ends the last one; all finish once the first is let go. (Locking the waiting callback
    first, then the running members, deadlocked with that end.)"""
    from jobs import statements
    from jobs.workflows import workflow_cancel

    flow = enqueue(
        workflows.chord(["tests.wf.add", "tests.wf.add", "tests.wf.add"], "tests.wf.collect")
    )
    first, second, last, callback = Job.objects.filter(workflow=flow).order_by("id")
    claimed = [services.job_claim(job.pk, worker="hand/1") for job in (first, second, last)]
    held, let_go, errors = threading.Event(), threading.Event(), []

    def in_thread(work):
        def run():
            try:
                work()
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
            finally:
                connection.close()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def end_last():
        job = claimed[-1]
        ran = statements.Success(job, "1", job.started_at, job.started_at)
        completer.succeed_many_and_claim(
            [ran], job.pk, 0, plan=None, task=job.task, worker="hand/1"
        )

    holder = threading.Thread(target=_hold_lock, args=(first.pk, held, let_go))
    holder.start()
    assert held.wait(timeout=10)
    cancel = in_thread(lambda: workflow_cancel(flow.pk, actor="op"))
    wait_until(lambda: _waiting_on_locks() >= 1 or None, timeout=10, message="the cancel to wait")
    end = in_thread(end_last)
    # The end waits on the cancel, or (not needing a row the cancel holds) is done at once.
    wait_until(
        lambda: _waiting_on_locks() >= 2 or not end.is_alive() or None,
        timeout=10,
        message="the end to wait or finish",
    )
    let_go.set()
    for thread in (holder, cancel, end):
        thread.join(30)
    assert errors == []
    callback.refresh_from_db()
    assert callback.status == S.CANCELLED
