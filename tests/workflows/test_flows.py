"""Chains, groups with callbacks and graphs, run by real workers on PostgreSQL and Redis."""

from jobs import workflows
from jobs.models import AuditLog, JobReason, JobStatus
from tests.workflows.conftest import assert_order, enqueue, wait_finished

S = JobStatus


def test_a_chain_passes_each_result_to_the_next_step(flow_worker):
    flow_worker()
    flow = enqueue(
        workflows.chain(
            ("tests.wf.add", {"n": 1}), ("tests.wf.add", {"n": 10}), ("tests.wf.add", {"n": 100})
        ),
        name="three",
    )
    jobs = wait_finished(flow)
    assert [job.status for job in jobs] == [S.SUCCEEDED] * 3
    assert [job.result for job in jobs] == [1, 11, 111]
    assert jobs[2].payload["previous"] == 11
    assert_order(flow)
    assert workflows.status_of(flow) == workflows.WorkflowStatus.SUCCEEDED


def test_a_chord_of_100_fires_its_callback_once_with_every_outcome(flow_worker):
    flow_worker(concurrency=4)
    failing = {7, 23, 42, 64, 99}
    members = [("tests.wf.fail" if n in failing else "tests.wf.add", {"n": n}) for n in range(100)]
    flow = enqueue(workflows.chord(members, ("tests.wf.collect", {})))
    jobs = wait_finished(flow, timeout=90)
    callback = jobs[-1]
    assert callback.task == "tests.wf.collect"
    assert callback.status == S.SUCCEEDED
    assert AuditLog.objects.filter(action="wf.callback", target_id=str(callback.pk)).count() == 1
    assert callback.result["statuses"] == {"succeeded": 95, "dead": 5}
    outcomes = callback.payload["members"]
    assert len(outcomes) == 100
    assert [outcome["job_id"] for outcome in outcomes] == [job.pk for job in jobs[:-1]]
    dead = [outcome for outcome in outcomes if outcome["status"] == "dead"]
    assert sorted(d["job_id"] - jobs[0].pk for d in dead) == sorted(failing)
    for outcome in dead:
        assert "cannot work" in outcome["error"]
        assert outcome["reason"] == JobReason.PERMANENT
    assert all(outcome["error"] is None for outcome in outcomes if outcome["status"] == "succeeded")
    assert callback.result["results"][:3] == [0, 1, 2]
    assert_order(flow)
    assert workflows.status_of(flow) == workflows.WorkflowStatus.FAILED


def test_a_diamond_runs_the_join_after_both_branches(flow_worker):
    flow_worker(concurrency=2)
    graph = workflows.graph(name="diamond")
    graph.add(("tests.wf.add", {"n": 1}), key="top")
    graph.add(("tests.wf.add", {"n": 2, "sleep": 0.5}), key="left", depends_on=["top"])
    graph.add(("tests.wf.add", {"n": 3}), key="right", depends_on=["top"])
    graph.add(("tests.wf.collect", {}), key="join", depends_on=["left", "right"])
    flow = enqueue(graph)
    top, left, right, join = wait_finished(flow)
    assert (top.result, left.result, right.result) == (1, 3, 4)
    assert join.result["results"] == [3, 4]
    assert join.started_at >= max(left.finished_at, right.finished_at)
    assert_order(flow)


def test_under_the_fail_rule_a_dead_step_cancels_its_dependants_with_the_reason(flow_worker):
    flow_worker()
    flow = enqueue(
        workflows.chain(
            ("tests.wf.fail", {"n": 1}), ("tests.wf.add", {"n": 2}), ("tests.wf.add", {"n": 3})
        )
    )
    first, second, third = wait_finished(flow)
    assert first.status == S.DEAD
    assert (second.status, second.reason) == (S.CANCELLED, JobReason.UPSTREAM)
    assert f"dependency job {first.pk}" in second.last_error
    assert (third.status, third.reason) == (S.CANCELLED, JobReason.UPSTREAM)
    assert second.started_at is None and third.started_at is None
    assert not AuditLog.objects.filter(
        action="wf.ran", target_id__in=[str(second.pk), str(third.pk)]
    ).exists()


def test_under_the_tolerate_rule_dependants_run_and_see_the_failure(flow_worker):
    flow_worker()
    flow = enqueue(
        workflows.chain(("tests.wf.fail", {"n": 1}), ("tests.wf.collect", {})),
        on_failure="tolerate",
    )
    first, second = wait_finished(flow)
    assert first.status == S.DEAD
    assert second.status == S.SUCCEEDED
    assert second.result["statuses"] == {"dead": 1}
