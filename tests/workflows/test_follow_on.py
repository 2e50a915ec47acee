"""A batch message runs the jobs of its own task and queue that its ends released (jobs.batches):
a chain's next step or a group's callback starts at once in the process that freed it, instead
of waiting for its doorbell to reach a free worker. Run in-process: no worker reads the queue,
so whatever ran, this message ran."""

import pytest

from jobs import batches, workflows
from jobs.models import Job, JobStatus
from tests.workflows.conftest import assert_order, enqueue
from tests.workflows.tasks import add

S = JobStatus
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _quick_bodies(monkeypatch):
    """This process has seen the task's bodies run in no time: a whole message is a chunk."""
    monkeypatch.setattr(batches, "_recent_seconds", {"tests.wf.add": 1e-4})


def _nodes(flow) -> list[Job]:
    return list(Job.objects.filter(workflow=flow).order_by("id"))


def test_a_chain_of_one_task_runs_to_its_end_in_the_message_of_its_first_step():
    flow = enqueue(
        workflows.chain(
            ("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10}), ("tests.wf.add", {"n": 100})
        )
    )
    first = _nodes(flow)[0]
    add([first.pk])  # one batch message naming the first step only
    nodes = _nodes(flow)
    assert [(node.status, node.result) for node in nodes] == [
        (S.SUCCEEDED, r) for r in (1, 11, 111)
    ]
    assert_order(flow)


def test_a_groups_callback_of_the_same_task_runs_in_the_message_that_ended_the_group():
    flow = enqueue(
        workflows.chord([("tests.wf.add", {"n": n}) for n in range(5)], ("tests.wf.add", {}))
    )
    *members, callback = _nodes(flow)
    add([member.pk for member in members])
    callback.refresh_from_db()
    assert callback.status == S.SUCCEEDED and len(callback.payload["members"]) == 5
    assert_order(flow)


def test_a_released_job_of_another_task_is_left_to_its_own_doorbell():
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.collect", {})))
    first, second = _nodes(flow)
    add([first.pk])
    second.refresh_from_db()
    assert Job.objects.get(pk=first.pk).status == S.SUCCEEDED
    assert second.status == S.QUEUED and second.attempts == 0  # released, not run here
