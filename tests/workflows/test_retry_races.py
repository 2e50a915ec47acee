"""An operator's retry of a workflow node racing a workflow cancel or a sibling's end.

The retry is held inside its transaction (after it decided, or after it let dependants wait
again) while another connection acts; each interleaving must leave no node waiting for ever
and no callback decided on an outcome the retry is replacing.
"""

import threading

import pytest
from django.db import connections

from jobs import completer, outcome, services, workflows
from jobs.attempts import error_info
from jobs.models import Job, JobReason, JobStatus, Workflow
from jobs.workflows import retry
from tests.processes import wait_until
from tests.workflows.conftest import enqueue
from tests.workflows.test_race import _waiting_on_locks

S = JobStatus
pytestmark = pytest.mark.django_db(transaction=True)


def _nodes(flow) -> list[Job]:
    return list(Job.objects.filter(workflow=flow).order_by("id"))


def _in_thread(call, results: dict, key: str) -> threading.Thread:
    def run():
        try:
            results[key] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test to assert on
            results[key] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _hold_after(monkeypatch, name: str) -> tuple[threading.Event, threading.Event]:
    """Hold ``jobs.workflows.retry.<name>`` once it returned, until the test lets it go."""
    reached, go = threading.Event(), threading.Event()
    original = getattr(retry, name)

    def held(*args):
        answer = original(*args)
        reached.set()
        assert go.wait(30)
        return answer

    monkeypatch.setattr(retry, name, held)
    return reached, go


def test_a_retry_and_a_workflow_cancel_at_once_leave_no_node_waiting_for_ever(monkeypatch):
    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add", "tests.wf.add"))
    _, second, _ = _nodes(flow)
    services.job_cancel(second.pk, actor="op")
    reached, go = _hold_after(monkeypatch, "retry_state")
    results: dict = {}
    retrying = _in_thread(lambda: services.job_retry(second.pk, actor="op"), results, "retry")
    assert reached.wait(30)
    cancelling = _in_thread(lambda: workflows.workflow_cancel(flow.pk, actor="op"), results, "c")
    wait_until(lambda: _waiting_on_locks() >= 1, timeout=30, message="the cancel to wait")
    go.set()
    retrying.join(30)
    cancelling.join(30)
    assert results["retry"].status == S.WAITING  # decided first: it waits for its dependency
    assert not isinstance(results["c"], BaseException), results["c"]
    assert Job.objects.get(pk=second.pk).status == S.CANCELLED  # then the cancel ended it
    assert workflows.status_of(Workflow.objects.get(pk=flow.pk)) == "cancelled"


def test_a_retried_member_and_its_siblings_end_at_once_release_the_callback_with_both(
    monkeypatch,
):
    flow = enqueue(workflows.batch(["tests.wf.add", "tests.wf.add"], on_success="tests.wf.collect"))
    first, second, callback = _nodes(flow)
    running = services.job_claim(second.pk, worker="hand/2")
    claimed = services.job_claim(first.pk, worker="hand/1")
    decision = outcome.Decision(S.DEAD, JobReason.PERMANENT, error=error_info(None, message="no"))
    completer.finish(decision, claimed)
    reached, go = _hold_after(monkeypatch, "retried")
    results: dict = {}
    retrying = _in_thread(lambda: services.job_retry(first.pk, actor="op"), results, "retry")
    assert reached.wait(30)
    success = outcome.Decision(S.SUCCEEDED, result="2")
    ending = _in_thread(lambda: completer.finish(success, running), results, "end")
    wait_until(lambda: _waiting_on_locks() >= 1, timeout=30, message="the end to wait")
    go.set()
    retrying.join(30)
    ending.join(30)
    monkeypatch.undo()
    assert Job.objects.get(pk=callback.pk).status == S.WAITING  # for the retried member
    again = services.job_claim(first.pk, worker="hand/1")
    completer.finish(outcome.Decision(S.SUCCEEDED, result="1"), again)
    callback.refresh_from_db()
    assert callback.status == S.QUEUED
    assert [m["status"] for m in callback.payload["members"]] == [S.SUCCEEDED] * 2
