"""A message runs the jobs of its own task and queue that its ends released (jobs.batches,
jobs.task): a chain's next step or a group's callback starts at once in the process that freed
it, instead of waiting for its doorbell to reach a free worker. Run in-process with the
messages jobs.publish would send: no worker reads the queue, so whatever ran, a message here
ran."""

from datetime import timedelta

import pytest
from django.db import connection

from jobs import batches, completer, outcome, publish, shutdown, workflows
from jobs.maintenance import sweeper
from jobs.models import Job, JobStatus
from jobs.task import claim_exactly
from jobs.workflows import release
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


def _deliver(jobs) -> None:
    """Run, here, the messages that jobs.publish sends for ``jobs``."""
    for task, _, ids, _ in publish.messages(jobs):
        assert task == "tests.wf.add"
        add(ids)


def test_a_chain_of_one_task_runs_to_its_end_in_the_message_of_its_first_step():
    steps = [("tests.wf.add", {"n": n}) for n in (1, 10, 100)]
    flow = enqueue(workflows.chain(*steps))
    first = _nodes(flow)[0]
    assert publish.messages([first]) == [("tests.wf.add", "default", first.pk, 0.0)]
    _deliver([first])  # one message, naming the first step only
    nodes = _nodes(flow)
    assert [(node.status, node.result) for node in nodes] == [
        (S.SUCCEEDED, result) for result in (1, 11, 111)
    ]
    assert_order(flow)


@pytest.mark.parametrize("members", [5, 40])  # one id per message; lists of ids
def test_a_groups_callback_of_the_same_task_runs_in_the_message_that_ended_the_group(members):
    group = [("tests.wf.add", {"n": n}) for n in range(members)]
    flow = enqueue(workflows.chord(group, ("tests.wf.add", {})))
    *nodes, callback = _nodes(flow)
    shapes = {type(ids) for _, _, ids, _ in publish.messages(nodes)}
    assert shapes == ({int} if members < 32 else {list})
    _deliver(nodes)
    callback.refresh_from_db()
    assert callback.status == S.SUCCEEDED and len(callback.payload["members"]) == members
    assert_order(flow)


def test_a_released_job_of_another_task_is_left_to_its_own_doorbell():
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.collect", {})))
    first, second = _nodes(flow)
    _deliver([first])
    second.refresh_from_db()
    assert Job.objects.get(pk=first.pk).status == S.SUCCEEDED
    assert second.status == S.QUEUED and second.attempts == 0  # released, not run here


def test_a_follow_on_this_message_runs_gets_no_doorbell_of_its_own(monkeypatch):
    """No second message for a job the message that released it claims itself: no other
    worker wakes for it only to find it taken."""
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    published = []
    monkeypatch.setattr(release, "publish_on_commit", lambda jobs: published.extend(jobs))
    add([first.pk])
    assert Job.objects.get(pk=second.pk).status == S.SUCCEEDED
    assert published == []


def test_a_shutdown_before_the_follow_on_rings_for_it(monkeypatch):
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    published, rung = [], []
    monkeypatch.setattr(release, "publish_on_commit", lambda jobs: published.extend(jobs))
    monkeypatch.setattr(batches, "_ring_again", lambda anchor, n: rung.append((anchor, n)))
    ended = completer.succeed_many

    def succeed_many(successes, **kwargs):  # a warm shutdown comes as the first step ends
        settled = ended(successes, **kwargs)
        monkeypatch.setattr(shutdown, "requested", lambda: True)
        return settled

    monkeypatch.setattr(completer, "succeed_many", succeed_many)
    add([first.pk])
    second.refresh_from_db()
    assert second.status == S.QUEUED and published == []  # released, held for this message
    assert rung == [(second.pk, 1)]  # which leaves it: its doorbell rung now


def test_a_follow_on_held_by_a_worker_that_dies_is_re_sent_by_the_sweeper(monkeypatch, settings):
    settings.CONVEYOR_SWEEPER_GRACE = timedelta(seconds=0)
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    published = []
    monkeypatch.setattr(release, "publish_on_commit", lambda jobs: published.extend(jobs))
    written = batches._Ran.write

    def write_then_die(ran, *args, **kwargs):  # the process is killed once the release commits
        written(ran, *args, **kwargs)
        raise SystemExit("killed")

    monkeypatch.setattr(batches._Ran, "write", write_then_die)
    with pytest.raises(SystemExit):
        add([first.pk])
    second.refresh_from_db()
    assert second.status == S.QUEUED and second.publish_count == 0 and published == []
    sent = []
    monkeypatch.setattr(sweeper, "publish", lambda jobs: sent.extend(jobs) or len(jobs))
    assert sweeper.sweep().republished == 1
    second.refresh_from_db()
    assert [job.pk for job in sent] == [second.pk] and second.publish_count == 1


def test_with_server_side_binding_a_node_still_releases_the_next(monkeypatch):
    """A database that prepares each message (one statement each) takes the ready check as
    a statement of its own."""
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    connection.close()
    options = {**connection.settings_dict.get("OPTIONS", {}), "server_side_binding": True}
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    try:
        run = claim_exactly(first.pk, task="tests.wf.add", worker="w/1")
        completer.finish(outcome.Decision(S.SUCCEEDED, result="1"), run)
    finally:
        connection.close()
    second.refresh_from_db()
    assert second.status == S.QUEUED and second.payload["previous"] == 1
