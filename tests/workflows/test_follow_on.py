"""A message runs the jobs of its own task and queue that its ends released (jobs.batches,
jobs.task): a chain's next step or a group's callback starts at once in the process that freed
it, instead of waiting for its doorbell to reach a free worker. Run in-process with the
messages jobs.publish would send: no worker reads the queue, so whatever ran, a message here
ran."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.tasks.signals import task_finished

from jobs import (
    batches,
    completer,
    limiter,
    outcome,
    publish,
    queues,
    services,
    shutdown,
    workflows,
)
from jobs.maintenance import sweeper
from jobs.models import Job, JobStatus
from jobs.task import claim_exactly
from jobs.tasks import django_task
from jobs.workflows import release
from tests import djangotasks
from tests.workflows.conftest import assert_order, enqueue
from tests.workflows.tasks import add, rated

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


@pytest.fixture
def doorbells(monkeypatch) -> list[int]:
    """The ids of the jobs whose doorbells are sent, whichever way."""
    sent: list[int] = []

    def record(jobs):
        sent.extend(job.pk for job in jobs)
        return len(jobs)

    for module, name in (
        (release, "publish_on_commit"),  # a release's
        (batches, "publish"),  # a follow-on the message held and did not claim
        (publish, "publish"),  # an enqueue's, once it commits
        (queues, "publish"),  # a shutdown's ring for the message's unused doorbells
        (limiter, "publish_on_commit"),  # a limit's
    ):
        monkeypatch.setattr(module, name, record)
    # A rate's ring for a batch message's unused doorbells, once the window frees.
    monkeypatch.setattr(limiter, "ring_later", lambda task, queue, ids, when: sent.extend(ids))
    return sent


def test_a_follow_on_this_message_runs_gets_no_doorbell_of_its_own(doorbells):
    """No second message for a job the message that released it claims itself: no other
    worker wakes for it only to find it taken."""
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    doorbells.clear()  # the first step's
    add([first.pk])
    assert Job.objects.get(pk=second.pk).status == S.SUCCEEDED
    assert doorbells == []


def _shutdown_after(monkeypatch, module, name) -> None:
    """A warm shutdown comes as ``module.name`` returns."""
    original = getattr(module, name)

    def then_shutdown(*args, **kwargs):
        answer = original(*args, **kwargs)
        monkeypatch.setattr(shutdown, "requested", lambda: True)
        return answer

    monkeypatch.setattr(module, name, then_shutdown)


def _queued_without_doorbell(doorbells) -> set[int]:
    return set(Job.objects.filter(status=S.QUEUED).values_list("pk", flat=True)) - set(doorbells)


@pytest.mark.parametrize("path", ["single", "batch"])
def test_a_shutdown_before_the_follow_on_rings_for_it(monkeypatch, doorbells, path):
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    doorbells.clear()  # the first step's
    _shutdown_after(monkeypatch, completer, "succeed_many")  # as the first step's end commits
    add(first.pk if path == "single" else [first.pk])
    second.refresh_from_db()
    assert second.status == S.QUEUED and doorbells == [second.pk]


def test_a_shutdown_with_doorbells_of_its_own_left_rings_for_those_and_the_follow_on(
    monkeypatch, doorbells
):
    """A message of two jobs, a chunk each: a shutdown after the first leaves the second
    job (its doorbell rung again) and the step the first released (its owed doorbell)."""
    monkeypatch.setattr(batches, "chunk_size", lambda task, wanted: 1)
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    with transaction.atomic():
        other = services.enqueue("tests.wf.add", {"n": 5})
    doorbells.clear()  # theirs
    _shutdown_after(monkeypatch, batches, "_run_chunk")
    add([first.pk, other.pk])
    assert set(Job.objects.filter(status=S.QUEUED).values_list("pk", flat=True)) == {
        second.pk,
        other.pk,
    }
    assert _queued_without_doorbell(doorbells) == set()


def test_the_ring_for_unused_doorbells_is_for_the_messages_own_task(monkeypatch, doorbells):
    """An older due job of another task in the same queue does not take it."""
    monkeypatch.setattr(batches, "chunk_size", lambda task, wanted: 1)
    with transaction.atomic():
        older = services.enqueue("tests.wf.collect", {})
        first, second = (services.enqueue("tests.wf.add", {"n": n}) for n in (1, 2))
    doorbells.clear()
    _shutdown_after(monkeypatch, batches, "_run_chunk")
    add([first.pk, second.pk])
    assert doorbells == [second.pk] and older.pk not in doorbells


def test_follow_ons_a_rate_refuses_each_get_their_doorbell(doorbells):
    flow = enqueue(
        workflows.chain(
            ("tests.wf.rated", {"n": 1}),
            workflows.group(("tests.wf.rated", {"n": 2}), ("tests.wf.rated", {"n": 3})),
        )
    )
    first, *follow = _nodes(flow)
    doorbells.clear()  # the first step's
    rated(first.pk)  # runs, releases both; the rate refuses the next start for a second
    assert Job.objects.get(pk=first.pk).status == S.SUCCEEDED
    # One each: the message owed them theirs, so the refusal rings none of its own.
    assert sorted(doorbells) == sorted(job.pk for job in follow)
    assert _queued_without_doorbell(doorbells) == set()


def test_follow_ons_of_a_slow_task_that_the_next_chunk_leaves_get_their_doorbells(
    monkeypatch, doorbells
):
    """Bodies slow here make chunks of one: the members this process does not take at once
    are rung before it runs the one it took, for other workers to run meanwhile."""
    monkeypatch.setattr(batches, "_recent_seconds", {"tests.wf.add": 1.0})
    steps = [("tests.wf.add", {"n": n}) for n in range(3)]
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), workflows.group(*steps)))
    first, *members = _nodes(flow)
    doorbells.clear()  # the first step's
    unrung_while_running = []
    run_chunk = batches._run_chunk

    def spy(task, claimed):
        unrung_while_running.append(_queued_without_doorbell(doorbells))
        return run_chunk(task, claimed)

    monkeypatch.setattr(batches, "_run_chunk", spy)
    add(first.pk)
    assert len(doorbells) == 2 and set(doorbells) < {member.pk for member in members}
    assert all(unrung == set() for unrung in unrung_while_running), unrung_while_running


def test_a_doorbell_that_fails_to_go_out_loses_no_success(monkeypatch, doorbells):
    """The follow-on's doorbell raises (a bug, not a broker that is away): the job the
    message claimed instead still has its run written; the follow-on is the sweeper's."""
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    better = []
    ended = completer.succeed_many

    def then_a_better_job(*args, **kwargs):  # due as the first step's end commits
        answer = ended(*args, **kwargs)
        if not better:
            with transaction.atomic():
                better.append(services.enqueue("tests.wf.add", {"n": 5}, priority=50))
        return answer

    monkeypatch.setattr(completer, "succeed_many", then_a_better_job)
    warned = []

    def broken(jobs):
        raise RuntimeError("a bug in the doorbell's path")

    monkeypatch.setattr(batches, "publish", broken)
    monkeypatch.setattr(batches.logger, "warning", lambda event, **kwargs: warned.append(event))
    add(first.pk)  # the follow-on's claim takes the better job first
    assert Job.objects.get(pk=first.pk).status == S.SUCCEEDED
    assert Job.objects.get(pk=better[0].pk).status == S.SUCCEEDED
    assert Job.objects.get(pk=second.pk).status == S.QUEUED
    assert warned == ["job.publish_failed"]


def test_a_follow_on_gets_its_doorbell_when_run_ended_raises(doorbells):
    """A django.tasks step whose ``task_finished`` receiver raises, after its end committed."""
    flow = enqueue(
        workflows.chain(
            (djangotasks.add, {"kwargs": {"x": 1, "y": 2}}),
            (djangotasks.add, {"kwargs": {"x": 3, "y": 4}}),
        )
    )
    first, second = _nodes(flow)
    doorbells.clear()  # the first step's

    def receiver(sender, **kwargs):
        raise RuntimeError("a receiver's bug")

    task_finished.connect(receiver, weak=False)
    try:
        with pytest.raises(RuntimeError):
            django_task(first.pk)
    finally:
        task_finished.disconnect(receiver)
    second.refresh_from_db()
    assert second.status == S.QUEUED and doorbells == [second.pk]


def test_a_follow_on_held_by_a_worker_that_dies_is_re_sent_by_the_sweeper(
    monkeypatch, settings, doorbells
):
    settings.CONVEYOR_SWEEPER_GRACE = timedelta(seconds=0)
    flow = enqueue(workflows.chain(("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10})))
    first, second = _nodes(flow)
    doorbells.clear()  # the first step's

    def killed(jobs):  # the process is killed before the doorbell it owes goes out
        raise SystemExit("killed")

    monkeypatch.setattr(batches, "publish", killed)
    _shutdown_after(monkeypatch, completer, "succeed_many")  # so that it does not run it
    with pytest.raises(SystemExit):
        add([first.pk])
    second.refresh_from_db()
    assert second.status == S.QUEUED and second.publish_count == 0 and doorbells == []
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
