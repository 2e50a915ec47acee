"""A group's members as one range edge: what waits on it, what a retry or a cancel does to
it, and when the edges stay one per dependency (jobs.workflows.rows.edges)."""

import json

import pytest
from django.db import connection

from jobs import completer, outcome, prepared, services, workflows
from jobs.models import Condition, FailureRule, Job, JobDependency, JobReason, JobStatus
from jobs.workflows import release
from tests.workflows.conftest import enqueue
from tests.workflows.test_operate import _die, _nodes, _succeed

S = JobStatus
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="range edges are PostgreSQL's (rows.edges)"
    ),
]


def _stored(flow) -> set[tuple]:
    return set(
        JobDependency.objects.filter(workflow=flow).values_list(
            "dependant_id", "dependency_id", "range_start", "range_end", "done"
        )
    )


def test_a_failed_member_retried_brings_the_cancelled_callback_back_to_wait_for_it():
    flow = enqueue(
        workflows.chord(
            ["tests.wf.add", "tests.wf.add", "tests.wf.add"],
            "tests.wf.collect",
            when=Condition.SUCCESS,
        )
    )
    first, second, third, callback = _nodes(flow)
    assert _stored(flow) == {(callback.pk, None, first.pk, third.pk, False)}  # one edge, three jobs

    _succeed(first)
    _die(second)
    callback.refresh_from_db()
    assert callback.status == S.WAITING  # the third has not ended
    _succeed(third, result="3")
    callback.refresh_from_db()
    assert (callback.status, callback.reason) == (S.CANCELLED, JobReason.UPSTREAM)
    assert _stored(flow) == {(callback.pk, None, first.pk, third.pk, True)}  # decided

    services.job_retry(second.pk, actor="op")
    callback.refresh_from_db()
    assert callback.status == S.WAITING and callback.finished_at is None
    assert _stored(flow) == {(callback.pk, None, first.pk, third.pk, False)}
    _succeed(Job.objects.get(pk=second.pk), result="2")
    callback.refresh_from_db()
    assert callback.status == S.QUEUED
    members = callback.payload["members"]
    assert [m["job_id"] for m in members] == [first.pk, second.pk, third.pk]
    assert [m["result"] for m in members] == [1, 2, 3]


def test_a_member_retried_before_the_others_end_keeps_the_callback_waiting_for_it():
    flow = enqueue(
        workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"),
        on_failure=FailureRule.TOLERATE,
    )
    first, second, callback = _nodes(flow)
    _die(first)
    services.job_retry(first.pk, actor="op")
    _succeed(second)
    callback.refresh_from_db()
    assert callback.status == S.WAITING  # the first runs again: the range has it unfinished
    _succeed(Job.objects.get(pk=first.pk), result="9")
    callback.refresh_from_db()
    assert callback.status == S.QUEUED
    assert [m["status"] for m in callback.payload["members"]] == [S.SUCCEEDED, S.SUCCEEDED]


def test_a_callback_cancelled_by_hand_then_retried_after_its_members_ended_runs():
    flow = enqueue(workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"))
    first, second, callback = _nodes(flow)
    services.job_cancel(callback.pk, actor="op")
    _succeed(first)
    _succeed(second)
    retried = services.job_retry(callback.pk, actor="op")
    assert retried.status == S.QUEUED  # nothing left to wait for, though its edge is not done
    callback.refresh_from_db()
    assert [m["job_id"] for m in callback.payload["members"]] == [first.pk, second.pk]


def test_a_callback_cancelled_by_hand_then_retried_while_a_member_runs_waits_for_it():
    flow = enqueue(workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"))
    first, second, callback = _nodes(flow)
    services.job_cancel(callback.pk, actor="op")
    _succeed(first)
    assert services.job_retry(callback.pk, actor="op").status == S.WAITING
    _succeed(second)
    callback.refresh_from_db()
    assert callback.status == S.QUEUED


def test_a_ranges_first_member_deleted_leaves_the_others_outcomes():
    """A range edge goes with its dependant only: the purge (or a bulk delete) of an ended
    workflow's members one by one leaves it, and a retried callback gets what is left."""
    flow = enqueue(workflows.chord(["tests.wf.add"] * 3, "tests.wf.collect"))
    first, second, third, callback = _nodes(flow)
    services.job_cancel(callback.pk, actor="op")
    for job, result in ((first, "1"), (second, "2"), (third, "3")):
        _succeed(job, result=result)
    Job.objects.filter(pk=first.pk).delete()
    assert _stored(flow) == {(callback.pk, None, first.pk, third.pk, False)}
    assert set(workflows.nodes_of(flow)[1]) == {
        (callback.pk, second.pk, True),
        (callback.pk, third.pk, True),
    }
    assert services.job_retry(callback.pk, actor="op").status == S.QUEUED
    callback.refresh_from_db()
    assert [m["result"] for m in callback.payload["members"]] == [2, 3]
    Job.objects.filter(pk=callback.pk).delete()  # the edge goes with its dependant
    assert not JobDependency.objects.filter(workflow=flow).exists()


def test_a_callbacks_own_keys_and_its_dependencies_results_are_kept_as_written():
    """``"members"`` replaces the callback's own; ``"previous"`` only where there is one
    dependency (a chain's step); a result's JSON text is copied, not decoded and encoded."""
    flow = enqueue(
        workflows.chain(
            "tests.wf.add",
            ("tests.wf.collect", {"previous": "mine", "members": "mine", "note": "ü\u2028"}),
        )
    )
    first, second = _nodes(flow)
    _succeed(first, result='{"x": 1.0000000000000001, "s": "\\"q\\""}')
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT payload->'previous', payload->'members'->0->'result', payload->>'note' "
            "FROM jobs_job WHERE id = %s",
            [second.pk],
        )
        previous, member, note = cursor.fetchone()
    assert json.loads(previous) == json.loads(member) == {"x": 1.0, "s": '"q"'}
    assert "1.0000000000000001" in previous and "1.0000000000000001" in member
    assert note == "ü\u2028"

    flow = enqueue(
        workflows.chord(
            ["tests.wf.add", "tests.wf.add"], ("tests.wf.collect", {"previous": "mine"})
        )
    )
    first, second, callback = _nodes(flow)
    _succeed(first)
    _succeed(second)
    callback.refresh_from_db()
    assert callback.payload["previous"] == "mine"  # two dependencies: no "previous" given
    assert len(callback.payload["members"]) == 2


def test_overlapping_or_unordered_dependencies_get_one_edge_each():
    graph = workflows.graph()
    a, b, c = (graph.add("tests.wf.add", key=key) for key in "abc")
    graph.add("tests.wf.collect", key="all", depends_on=[a, b, c])
    graph.add("tests.wf.collect", key="last_two", depends_on=[b, c])  # inside "all"'s range
    graph.add("tests.wf.collect", key="backwards", depends_on=[c, b])  # not in id order
    graph.add("tests.wf.collect", key="same", depends_on=[a, b, c])  # "all"'s range again
    flow = enqueue(graph)
    first, second, third, whole, last_two, backwards, same = _nodes(flow)
    assert _stored(flow) == {
        (whole.pk, None, first.pk, third.pk, False),
        (last_two.pk, second.pk, None, None, False),
        (last_two.pk, third.pk, None, None, False),
        (backwards.pk, third.pk, None, None, False),
        (backwards.pk, second.pk, None, None, False),
        (same.pk, None, first.pk, third.pk, False),
    }
    for job, result in ((third, "3"), (first, "1"), (second, "2")):
        _succeed(job, result=result)
    for dependant, expected in ((whole, [1, 2, 3]), (last_two, [2, 3]), (backwards, [3, 2])):
        dependant.refresh_from_db()
        assert dependant.status == S.QUEUED
        assert [m["result"] for m in dependant.payload["members"]] == expected
    assert Job.objects.get(pk=same.pk).status == S.QUEUED


def test_a_running_members_end_after_the_workflows_cancel_releases_nothing():
    flow = enqueue(workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"))
    first, second, callback = _nodes(flow)
    running = services.job_claim(first.pk, worker="hand/1")
    assert running is not None
    workflows.workflow_cancel(flow.pk, actor="op")
    assert set(workflows.nodes_of(flow)[1]) == {
        (callback.pk, first.pk, False),  # it runs
        (callback.pk, second.pk, True),  # cancelled: ended
    }
    completer.finish(outcome.Decision(S.SUCCEEDED, result="1"), running)
    assert Job.objects.get(pk=first.pk).status in (S.SUCCEEDED, S.CANCELLED)
    callback.refresh_from_db()
    assert (callback.status, callback.reason) == (S.CANCELLED, JobReason.CANCELLED)
    assert "members" not in callback.payload
    assert set(workflows.nodes_of(flow)[1]) == {
        (callback.pk, first.pk, True),
        (callback.pk, second.pk, True),
    }


def test_the_range_statements_use_their_indexes_at_scale():
    """With a 2,000-member group most of which has ended, beside a long history of jobs and
    edges and with statistics that know of no queued job, a chunk's end finds the range
    through its index and asks whether a member is left of the range's entries only, in the
    generic plans a worker keeps (jobs.prepared) — not of every queued job, which a backlog
    come since would make many."""
    flow = enqueue(
        workflows.chord([("tests.wf.add", {"n": n}) for n in range(2000)], "tests.wf.collect")
    )
    ids = list(Job.objects.filter(workflow=flow).order_by("id").values_list("id", flat=True))
    Job.objects.filter(pk__in=ids[:1800]).update(status=S.SUCCEEDED)
    Job.objects.filter(pk__in=ids[1800:-1]).update(status=S.RUNNING)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_job (task, queue, payload, status, priority, attempts, "
            "max_attempts, run_after, locked_by, last_error, reason, attempts_history, "
            "publish_count, created_at, updated_at, finished_at, unique_states, limit_key, "
            "workflow_id) SELECT 'tests.record', 'default', '{}', 'succeeded', 0, 0, 1, now(), "
            "'', '', '', '[]', 0, now(), now(), now(), '', '', %s + g %% 1000 "
            "FROM generate_series(1, 50000) AS g",
            [flow.pk + 1],
        )
        cursor.execute(  # other workflows' edges: plain ones, and a range in every ten
            "INSERT INTO jobs_jobdependency (workflow_id, dependant_id, dependency_id, "
            "condition, done, range_start, range_end) SELECT %s + g %% 1000, 10000000 + g, "
            "CASE WHEN g %% 10 <> 0 THEN 20000000 + g END, 'success', g %% 3 = 0, "
            "CASE WHEN g %% 10 = 0 THEN 20000000 + g END, "
            "CASE WHEN g %% 10 = 0 THEN 20000000 + g + 9 END "
            "FROM generate_series(1, 100000) AS g",
            [flow.pk + 2],
        )
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("ANALYZE jobs_jobdependency")
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        plans = {}
        for name, sql, params in (
            ("mark", release._MARK_AND_LOCK_PG, [ids[1900:1925], [flow.pk] * 25]),
            ("ready", release._READY, [ids[1900:1925], [flow.pk] * 25, S.WAITING]),
            ("waits", f"SELECT {release.waits('%s')}", [ids[-1]]),
        ):
            cursor.execute(prepared._prepare(f"probe_{name}", sql))
            marks = ", ".join(["%s"] * len(params))
            cursor.execute(f"EXPLAIN EXECUTE probe_{name}({marks})", params)
            plans[name] = "\n".join(row[0] for row in cursor.fetchall())
            cursor.execute(f"DEALLOCATE probe_{name}")
        cursor.execute("RESET plan_cache_mode")
    for name in ("mark", "ready"):
        assert "job_dep_range_idx" in plans[name], plans[name]
    for plan in plans.values():
        assert "Seq Scan on jobs_job " not in plan, plan
    for name in ("ready", "waits"):  # the members' probe: the range's entries of that index
        probes = [line for line in plans[name].splitlines() if " on jobs_job m" in line]
        assert probes and all("job_workflow_open_idx" in line for line in probes), plans[name]
        assert "Index Cond: ((workflow_id = e.workflow_id) AND (id >=" in plans[name], plans[name]
