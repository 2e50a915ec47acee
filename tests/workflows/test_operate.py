"""Operators and failures: cancel, retry and resume; bad workflows refused with nothing written.

Ends are recorded by hand here (claim, then jobs.completer), as a worker would, so each
case controls exactly which node ends how.
"""

from datetime import datetime

import pytest
from celery import chain as celery_chain
from celery import chord as celery_chord
from celery import group as celery_group
from django.db import transaction
from django.db.models import ProtectedError
from django.test import override_settings

from jobs import completer, outcome, services, workflows
from jobs.attempts import error_info
from jobs.models import Job, JobDependency, JobReason, JobStatus, Workflow
from tests.workflows import tasks
from tests.workflows.conftest import enqueue

S = JobStatus
pytestmark = pytest.mark.django_db(transaction=True)


def _nodes(flow) -> list[Job]:
    return list(Job.objects.filter(workflow=flow).order_by("id"))


def _succeed(job: Job, result: str = "1") -> Job:
    claimed = services.job_claim(job.pk, worker="hand/1")
    assert claimed is not None, job
    return completer.finish(outcome.Decision(S.SUCCEEDED, result=result), claimed)


def _die(job: Job) -> Job:
    claimed = services.job_claim(job.pk, worker="hand/1")
    decision = outcome.Decision(S.DEAD, JobReason.PERMANENT, error=error_info(None, message="no"))
    return completer.finish(decision, claimed)


def test_a_dead_step_retried_resumes_the_chain_where_it_stopped():
    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add", "tests.wf.add"))
    first, second, third = _nodes(flow)
    _succeed(first)
    _die(second)
    third.refresh_from_db()
    assert (third.status, third.reason) == (S.CANCELLED, JobReason.UPSTREAM)
    services.job_retry(second.pk, actor="op")
    third.refresh_from_db()
    assert third.status == S.WAITING and third.finished_at is None
    _succeed(Job.objects.get(pk=second.pk), result="5")
    third.refresh_from_db()
    assert third.status == S.QUEUED and third.payload["previous"] == 5


def test_a_cancelled_member_counts_as_ended_for_an_on_complete_callback():
    flow = enqueue(workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"))
    first, second, callback = _nodes(flow)
    _succeed(first)
    services.job_cancel(second.pk, actor="op")
    callback.refresh_from_db()
    assert callback.status == S.QUEUED
    assert [m["status"] for m in callback.payload["members"]] == ["succeeded", "cancelled"]


def test_a_step_cancelled_while_its_dependency_runs_waits_for_it_again_when_retried():
    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add", "tests.wf.add"))
    first, second, third = _nodes(flow)
    running = services.job_claim(first.pk, worker="hand/1")
    services.job_cancel(second.pk, actor="op")
    third.refresh_from_db()
    assert (third.status, third.reason) == (S.CANCELLED, JobReason.UPSTREAM)

    retried = services.job_retry(second.pk, actor="op")
    assert retried.status == S.WAITING  # not queued: its dependency has not ended
    assert retried.reason == ""  # no end shown until it ends again
    third.refresh_from_db()
    assert third.status == S.WAITING

    completer.finish(outcome.Decision(S.SUCCEEDED, result="7"), running)
    second.refresh_from_db()
    assert second.status == S.QUEUED and second.payload["previous"] == 7


def test_a_step_retried_after_its_dependency_ended_runs_with_that_outcome():
    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add"))
    first, second = _nodes(flow)
    _die(first)
    second.refresh_from_db()
    assert (second.status, second.reason) == (S.CANCELLED, JobReason.UPSTREAM)

    retried = services.job_retry(second.pk, actor="op")  # the operator asks it to run anyway
    assert retried.status == S.QUEUED
    second.refresh_from_db()
    assert [m["status"] for m in second.payload["members"]] == [S.DEAD]
    assert "previous" in second.payload and second.payload["previous"] is None


def test_in_a_workflow_cancelled_as_a_whole_a_retried_job_runs_alone():
    flow = workflows.graph()
    first = flow.add("tests.wf.add", key="first")
    flow.add("tests.wf.add", key="second", depends_on=[first])
    flow.add("tests.wf.add", key="alone")
    flow = enqueue(flow)
    nodes = _nodes(flow)
    (second,) = [job for job in nodes if job.status == S.WAITING]
    first, alone = [job for job in nodes if job.status == S.QUEUED]
    assert services.job_claim(alone.pk, worker="hand/1") is not None
    _die(first)
    workflows.workflow_cancel(flow.pk, actor="op")  # the running one is asked to stop

    assert services.job_retry(first.pk, actor="op").status == S.QUEUED
    second.refresh_from_db()
    assert (second.status, second.reason) == (S.CANCELLED, JobReason.UPSTREAM)  # not again
    assert services.job_retry(second.pk, actor="op").status == S.QUEUED


def test_a_graph_node_may_depend_on_one_key_given_alone():
    flow = workflows.graph()
    flow.add("tests.wf.add", key="ab")
    flow.add("tests.wf.add", key="c", depends_on="ab")  # the key, not its letters
    first, second = _nodes(enqueue(flow))
    assert (first.status, second.status) == (S.QUEUED, S.WAITING)


def test_a_callback_not_needed_is_no_failure_for_what_follows_it():
    flow = enqueue(
        workflows.chain(
            workflows.batch(["tests.wf.add"], on_failure="tests.wf.collect"), "tests.wf.add"
        )
    )
    member, on_failure, last = _nodes(flow)
    _succeed(member)
    on_failure.refresh_from_db()
    assert (on_failure.status, on_failure.reason) == (S.CANCELLED, JobReason.NOT_NEEDED)
    last.refresh_from_db()
    assert last.status == S.QUEUED  # not cancelled upstream
    _succeed(last)
    assert workflows.status_of(Workflow.objects.get(pk=flow.pk)) == "succeeded"


def test_a_waiting_job_cannot_be_retried_into_the_queue_but_can_be_cancelled():
    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add"))
    _, second = _nodes(flow)
    with pytest.raises(Exception, match="cannot retry"):
        services.job_retry(second.pk, actor="op")
    assert services.job_cancel(second.pk, actor="op").status == S.CANCELLED


def test_stricter_callbacks_run_only_when_their_condition_holds():
    flow = enqueue(
        workflows.batch(
            ["tests.wf.add", "tests.wf.fail"],
            on_success="tests.wf.collect",
            on_failure="tests.wf.collect",
            on_complete="tests.wf.collect",
        )
    )
    ok, bad, on_complete, on_success, on_failure = _nodes(flow)
    _succeed(ok)
    _die(bad)
    statuses = {job.pk: job.status for job in _nodes(flow)}
    assert statuses[on_complete.pk] == S.QUEUED
    assert statuses[on_success.pk] == S.CANCELLED
    assert statuses[on_failure.pk] == S.QUEUED


def test_cancelling_a_workflow_cancels_what_has_not_finished():
    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add", "tests.wf.add"))
    first, second, third = _nodes(flow)
    running = services.job_claim(first.pk, worker="hand/1")
    workflows.workflow_cancel(flow.pk, actor="op")
    statuses = [job.status for job in _nodes(flow)]
    assert statuses == [S.RUNNING, S.CANCELLED, S.CANCELLED]
    assert Job.objects.get(pk=first.pk).cancel_requested_at is not None
    ended = completer.finish(outcome.Decision(S.SUCCEEDED, result="1"), running)
    assert ended.status == S.CANCELLED  # the cancel asked for meanwhile wins, as for any job
    assert workflows.status_of(Workflow.objects.get(pk=flow.pk)) == "cancelled"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: workflows.chain("tests.wf.add", "tests.nope"), "node '#1': unknown task"),
        (lambda: workflows.chain("tests.wf.add", 42), "step 42 is not a task"),
        (
            lambda: _cycle(),
            "cycle through node(s) 'a', 'b', 'c'",
        ),
        (lambda: workflows.group(*["tests.wf.add"] * 4), "more than CONVEYOR_WORKFLOW_MAX_NODES"),
        (lambda: workflows.chain(tasks.add.s(1)), "positional arguments are not supported"),
        (
            lambda: workflows.chain("tests.wf.add", "maintenance.reap_jobs"),
            "node '#1': task 'maintenance.reap_jobs' is a plain Celery task",
        ),
        (lambda: workflows.chain(tasks.add.map([{}])), "chunks, map and starmap"),
        (
            lambda: workflows.chain(("tests.wf.add", {}, {"max_attempts": -1})),
            "node '#0': a job's max_attempts is between 1 and",
        ),
        (
            lambda: workflows.chain(("tests.wf.add", {}, {"queue": "q" * 101})),
            "node '#0': a job's queue is a name of 1 to 100 characters",
        ),
        (
            lambda: workflows.chain(("tests.wf.add", {"at": datetime(2026, 1, 1)})),
            "node '#0': a job's payload holds a datetime, which JSON cannot store",
        ),
        (
            lambda: workflows.chain(("tests.wf.add", {"x": float("nan")})),
            "node '#0': a job's payload holds nan",
        ),
    ],
)
@override_settings(CONVEYOR_WORKFLOW_MAX_NODES=3)
def test_a_bad_workflow_is_refused_at_enqueue_with_nothing_written(build, message):
    with pytest.raises(workflows.WorkflowError, match=_escape(message)), transaction.atomic():
        build().enqueue()
    assert not Workflow.objects.exists()
    assert not Job.objects.exists()
    assert not JobDependency.objects.exists()


def _cycle():
    graph = workflows.graph()
    graph.add("tests.wf.add", key="a", depends_on=["c"])
    graph.add("tests.wf.add", key="b", depends_on=["a"])
    graph.add("tests.wf.add", key="c", depends_on=["b"])
    return graph


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_a_celery_canvas_becomes_the_same_durable_workflow():
    canvas = celery_chain(
        tasks.add.s(n=1),
        celery_chord(
            celery_group(tasks.add.s(n=2), tasks.add.s(n=3).set(priority=5)),
            tasks.collect.s(),
        ),
    )
    flow = enqueue(workflows.chain(canvas))
    first, left, right, callback = _nodes(flow)
    assert [job.task for job in (first, left, right, callback)] == [
        "tests.wf.add",
        "tests.wf.add",
        "tests.wf.add",
        "tests.wf.collect",
    ]
    assert right.priority == 5 and left.payload == {"n": 2}
    edges = set(
        JobDependency.objects.values_list(
            "dependant_id", "dependency_id", "condition", "range_start", "range_end"
        )
    )
    assert edges == {
        (left.pk, first.pk, "success", None, None),
        (right.pk, first.pk, "success", None, None),
        (callback.pk, None, "complete", left.pk, right.pk),  # one edge for the group's two
    }
    assert set(workflows.nodes_of(flow)[1]) == {
        (left.pk, first.pk, False),
        (right.pk, first.pk, False),
        (callback.pk, left.pk, False),
        (callback.pk, right.pk, False),
    }
    assert first.status == S.QUEUED and {left.status, right.status, callback.status} == {S.WAITING}


def test_purging_a_workflows_jobs_deletes_their_edges_then_its_row_and_keeps_the_rest():
    """The edges have no constraint in the database: the purge's statement deletes them."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.maintenance.purge import purge

    old = enqueue(workflows.chain("tests.wf.add", "tests.wf.add", "tests.wf.add"))
    kept = enqueue(workflows.chain("tests.wf.add", "tests.wf.add"))
    for job in _nodes(old):
        _succeed(Job.objects.get(pk=job.pk))
    long_ago = timezone.now() - timedelta(days=30)
    Job.objects.filter(workflow=old).update(finished_at=long_ago)
    assert JobDependency.objects.filter(workflow=old).count() == 2

    Workflow.objects.filter(pk__in=[old.pk, kept.pk]).update(created_at=long_ago)
    result = purge()
    # its jobs first, then its row (the other's jobs have not finished: it stays)
    assert (result.completed, result.workflows) == (3, 1)
    assert not Job.objects.filter(workflow_id=old.pk).exists()
    assert not JobDependency.objects.filter(workflow_id=old.pk).exists()
    assert list(Workflow.objects.values_list("pk", flat=True)) == [kept.pk]
    assert JobDependency.objects.filter(workflow=kept).count() == 1
    assert Job.objects.filter(workflow=kept).count() == 2


def test_a_running_workflows_finished_jobs_outlive_their_retention_until_it_ends():
    """Its callback gets every member's outcome, and a retry resumes it from them: neither
    the purge nor a bulk delete takes a finished job of a workflow still running."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.utils import timezone

    from jobs import bulk
    from jobs.maintenance.purge import purge
    from jobs.models import BulkAction

    flow = enqueue(workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"))
    first, second, callback = _nodes(flow)
    alone = services.enqueue("tests.wf.add", {})
    for job in (first, alone):
        _succeed(job, result="7")
    long_ago = timezone.now() - timedelta(days=30)
    Job.objects.filter(pk__in=[first.pk, alone.pk]).update(finished_at=long_ago)

    assert purge().completed == 1  # the job on its own; the running chord's member stays
    assert not Job.objects.filter(pk=alone.pk).exists()
    user = get_user_model().objects.create_user("operator", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "delete_job"]))
    operation = bulk.bulk_create(action=BulkAction.DELETE, filters={}, user=user)
    bulk.bulk_run(operation.pk, pause=0)
    operation.refresh_from_db()
    assert (operation.done, operation.failed) == (0, 1)
    assert operation.errors == [f"job {first.pk} is kept: workflow {flow.pk} has not ended"]

    _succeed(Job.objects.get(pk=second.pk), result="8")
    callback.refresh_from_db()
    assert [m["result"] for m in callback.payload["members"]] == [7, 8]
    _succeed(Job.objects.get(pk=callback.pk))  # the workflow has ended: its jobs may go
    assert purge().completed == 1
    assert not Job.objects.filter(pk=first.pk).exists()


def test_a_failed_workflow_is_purged_whole_once_its_dead_job_goes():
    """A dead job is kept longer than its succeeded siblings and cancelled dependants: they
    stay with it, so a retry within that time resumes the workflow whole."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.maintenance.purge import purge

    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add", "tests.wf.add"))
    first, second, third = _nodes(flow)
    _succeed(first, result="2")
    _die(second)
    eight_days_ago = timezone.now() - timedelta(days=8)
    Job.objects.filter(workflow=flow).update(finished_at=eight_days_ago)

    result = purge()  # past the completed retention, not the dead one: all three kept
    assert (result.completed, result.dead) == (0, 0)
    assert Job.objects.filter(workflow=flow).count() == 3
    services.job_retry(second.pk, actor="op")  # resumes: its dependant waits again
    _succeed(Job.objects.get(pk=second.pk), result="5")
    third.refresh_from_db()
    assert third.status == S.QUEUED and third.payload["previous"] == 5

    _die(third)
    long_ago = timezone.now() - timedelta(days=31)
    Job.objects.filter(workflow=flow).update(finished_at=long_ago)
    result = purge()  # the dead job goes first, then the rest with it
    assert (result.completed, result.dead) == (2, 1)
    assert not Job.objects.filter(workflow=flow).exists()


def test_a_workflows_keys_are_checked_by_nothing_at_commit_and_edges_go_with_their_jobs():
    """No constraint on a node's or an edge's key: the enqueue's commit would check it once
    per row. Django's delete of a workflow waits for its jobs; their edges go with them."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
                "AND confrelid = 'jobs_workflow'::regclass"
            )
            assert cursor.fetchall() == []
    flow = enqueue(workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"))
    nodes = _nodes(flow)
    assert JobDependency.objects.filter(workflow=flow).count() == 1  # a range: both members

    with pytest.raises(ProtectedError, match="cancel it"):  # its callback would wait for good
        Workflow.objects.filter(pk=flow.pk).delete()
    workflows.workflow_cancel(flow.pk, actor="test")
    with pytest.raises(ProtectedError, match="delete them first"):  # as the purge: jobs first
        Workflow.objects.filter(pk=flow.pk).delete()
    Job.objects.filter(pk__in=[job.pk for job in nodes]).delete()
    assert not JobDependency.objects.filter(workflow_id=flow.pk).exists()  # with their jobs
    Workflow.objects.filter(pk=flow.pk).delete()
    assert not Workflow.objects.filter(pk=flow.pk).exists()


def test_a_batch_that_succeeded_is_succeeded_though_its_on_failure_callback_was_not_needed():
    flow = enqueue(
        workflows.batch(
            ["tests.wf.add"], on_success="tests.wf.collect", on_failure="tests.wf.collect"
        )
    )
    member, on_success, on_failure = _nodes(flow)
    _succeed(member)
    on_failure.refresh_from_db()
    assert (on_failure.status, on_failure.reason) == (S.CANCELLED, JobReason.NOT_NEEDED)
    _succeed(Job.objects.get(pk=on_success.pk))
    flow.refresh_from_db()
    assert workflows.status_of(flow) == "succeeded"
    Job.objects.filter(pk=member.pk).delete()  # one of its jobs purged: no longer known
    assert workflows.status_of(flow) == "purged"
