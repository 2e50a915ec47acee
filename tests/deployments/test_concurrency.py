"""Concurrency policies with two real workers: who runs, who waits, who is superseded."""

from deployments.models import FailureReason
from deployments.services import deployment_create
from jobs.models import Job
from jobs.publish import publish
from tests.deployments.conftest import log_text, read_pids, wait_for
from tests.deployments.test_stopping import TREE
from tests.processes import alive, wait_until

FINAL = ("success", "failed", "cancelled")


def two_workers(deploy_worker, env: dict | None = None):
    return [deploy_worker(name=f"w{n}-{id(deploy_worker) % 1000}", env=env) for n in (1, 2)]


def overlaps(a, b) -> bool:
    return a.started_at < b.finished_at and b.started_at < a.finished_at


def test_queue_runs_one_at_a_time_in_order_while_other_projects_run_alongside(
    make_project, deploy_worker
):
    steps = {"default": [{"name": "work", "command": "sleep 2"}]}
    project = make_project("web", concurrency_policy="queue", pipelines=steps)
    other = make_project("api", pipelines=steps)
    # A waiting deployment would look again only after 60s: it must be woken by the one
    # before it, at once.
    workers = two_workers(deploy_worker, env={"CONVEYOR_DEPLOYMENT_WAIT": "60s"})
    queued = [deployment_create(project=project, ref=f"r{n}") for n in range(3)]
    parallel = deployment_create(project=other, ref="main")
    done = [wait_for(d, *FINAL, timeout=90) for d in queued]
    beside = wait_for(parallel, *FINAL, timeout=90)
    assert [d.status for d in done] == ["success"] * 3 and beside.status == "success"
    for before, after in zip(done, done[1:], strict=False):
        assert before.finished_at <= after.started_at
        assert (after.started_at - before.finished_at).total_seconds() < 5
    assert overlaps(beside, done[0]) or overlaps(beside, done[1])
    # Waiting spent no attempt: every job ran exactly once.
    assert [Job.objects.get(pk=d.job_id).attempts for d in done] == [1, 1, 1]
    assert sum(len(w.events("job.snoozed")) for w in workers) >= 1


def test_supersede_keeps_the_running_one_and_only_the_newest_pending(make_project, deploy_worker):
    project = make_project(
        concurrency_policy="supersede",
        pipelines={"default": [{"name": "work", "command": "sleep 2; echo ref=$CONVEYOR_REF"}]},
    )
    two_workers(deploy_worker)
    first = deployment_create(project=project, ref="first")
    wait_for(first, "running")
    middle = deployment_create(project=project, ref="middle")
    last = deployment_create(project=project, ref="last")
    middle = wait_for(middle, *FINAL)
    assert (middle.status, middle.failure_reason) == ("cancelled", FailureReason.SUPERSEDED)
    first, last = wait_for(first, *FINAL), wait_for(last, *FINAL, timeout=90)
    assert first.status == last.status == "success"
    assert first.finished_at <= last.started_at
    assert "ref=last" in log_text(last)
    assert middle.started_at is None


def test_cancel_in_progress_stops_the_running_one_for_the_newest(
    make_project, deploy_worker, tmp_path
):
    pids = tmp_path / "pids"
    project = make_project(
        concurrency_policy="cancel_in_progress",
        pipelines={"default": [{"name": "work", "command": TREE.format(pids=pids)}]},
    )
    two_workers(deploy_worker)
    old = deployment_create(project=project, ref="old")
    wait_until(lambda: len(read_pids(pids)) == 4, timeout=60, message="the old step's tree")
    project.pipelines.get().steps.update(command="echo new-one")
    new = deployment_create(project=project, ref="new")
    old, new = wait_for(old, *FINAL), wait_for(new, *FINAL, timeout=90)
    assert (old.status, old.failure_reason) == ("cancelled", FailureReason.SUPERSEDED)
    assert new.status == "success" and old.finished_at <= new.started_at
    assert [pid for pid in read_pids(pids) if alive(pid)] == []


def test_duplicate_messages_never_run_a_deployment_twice(make_project, deploy_worker, tmp_path):
    ran = tmp_path / "ran"
    project = make_project(
        pipelines={"default": [{"name": "once", "command": f"echo x >> {ran}; sleep 1"}]}
    )
    two_workers(deploy_worker)
    deployment = deployment_create(project=project, ref="main")
    job = Job.objects.get(pk=deployment.job_id)
    publish([job, job, job])  # the broker delivers the same job three more times
    done = wait_for(deployment, *FINAL)
    assert done.status == "success"
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "succeeded", timeout=30, message="job")
    assert ran.read_text() == "x\n"
