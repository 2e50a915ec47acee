"""The claim and the concurrency policies, decided under the environment lock (no worker)."""

import threading

import pytest
from django.db import connection

from deployments.models import FailureReason
from deployments.policy import Decision
from deployments.services import deployment_claim, deployment_create
from jobs.models import Job
from jobs.services import job_cancel, job_claim


def claim(deployment, worker="w/1"):
    """Do what a worker does: claim the job (if it still can be), then the deployment."""
    job = job_claim(deployment.job_id, worker=worker) or Job.objects.get(pk=deployment.job_id)
    return deployment_claim(deployment_id=deployment.pk, job=job)


def status_of(deployment) -> tuple[str, str]:
    deployment.refresh_from_db()
    return deployment.status, deployment.failure_reason


def test_create_writes_the_deployment_and_its_job_together(make_project):
    deployment = deployment_create(project=make_project(), ref="main", triggered_by="ci")
    job = Job.objects.get(pk=deployment.job_id)
    assert (job.task, job.queue, job.max_attempts) == ("deployments.run", "deployments", 1)
    assert job.payload == {"deployment_id": deployment.pk}
    assert deployment.status == "pending" and deployment.attempt == 1
    assert deployment.steps == [
        {
            "name": "hello",
            "command": "echo hello",
            "timeout": None,
            "env": {},
            "continue_on_error": False,
        }
    ]


def test_a_deployment_is_claimed_once(make_project):
    deployment = deployment_create(project=make_project(), ref="main")
    first = claim(deployment)
    assert first.decision is Decision.RUN and first.deployment.status == "running"
    assert first.deployment.started_at is not None and first.deployment.worker == "w/1"
    assert claim(deployment, "w/2").decision is None
    assert claim(deployment, "w/1").decision is None


def test_concurrent_claims_let_exactly_one_win(make_project):
    deployment = deployment_create(project=make_project(), ref="main")
    barrier = threading.Barrier(4)
    results = []

    def race(n):
        try:
            barrier.wait()
            results.append(claim(deployment, f"w/{n}").decision)
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(str(r) for r in results) == sorted(["Decision.RUN", "None", "None", "None"])


def test_queue_waits_for_the_running_one_and_keeps_creation_order(make_project):
    project = make_project(concurrency_policy="queue")
    first = deployment_create(project=project, ref="a")
    second = deployment_create(project=project, ref="b")
    third = deployment_create(project=project, ref="c")
    assert claim(third).decision is Decision.WAIT  # older ones first, even with none running
    assert claim(first).decision is Decision.RUN
    assert claim(second).decision is Decision.WAIT
    other_env = deployment_create(project=project, ref="d", environment="staging")
    assert claim(other_env).decision is Decision.RUN  # environments are independent
    assert status_of(second) == ("pending", "")


def test_supersede_cancels_the_older_pending_one_at_creation(make_project):
    project = make_project(concurrency_policy="supersede")
    running = deployment_create(project=project, ref="a")
    assert claim(running).decision is Decision.RUN
    older = deployment_create(project=project, ref="b")
    newer = deployment_create(project=project, ref="c")
    assert status_of(older) == ("cancelled", FailureReason.SUPERSEDED)
    assert Job.objects.get(pk=older.job_id).status == "cancelled"
    assert status_of(running) == ("running", "")  # supersede lets the running one finish
    assert claim(newer).decision is Decision.WAIT


def test_cancel_in_progress_stops_the_running_one(make_project):
    project = make_project(concurrency_policy="cancel_in_progress")
    running = deployment_create(project=project, ref="a")
    assert claim(running).decision is Decision.RUN
    newer = deployment_create(project=project, ref="b")
    assert status_of(running) == ("cancelling", FailureReason.SUPERSEDED)
    assert Job.objects.get(pk=running.job_id).cancel_requested_at is not None
    assert claim(newer).decision is Decision.WAIT  # until the old one has really stopped


def test_cancelling_a_pending_deployments_job_cancels_the_deployment(make_project):
    project = make_project(concurrency_policy="queue")
    pending = deployment_create(project=project, ref="a")
    job_cancel(pending.job_id, actor="operator")  # through the jobs API or admin
    assert status_of(pending) == ("cancelled", FailureReason.CANCELLED)
    later = deployment_create(project=project, ref="b")
    assert claim(later).decision is Decision.RUN


def test_an_older_pending_deployment_whose_job_was_lost_no_longer_blocks(make_project):
    project = make_project(concurrency_policy="queue")
    orphan = deployment_create(project=project, ref="a")
    Job.objects.filter(pk=orphan.job_id).update(status="cancelled")  # lost without a signal
    later = deployment_create(project=project, ref="b")
    assert claim(later).decision is Decision.RUN
    assert status_of(orphan) == ("failed", FailureReason.JOB_LOST)


@pytest.mark.parametrize("policy", ["supersede", "cancel_in_progress"])
def test_an_older_pending_deployment_claimed_late_is_superseded(make_project, policy):
    project = make_project(concurrency_policy=policy)
    older = deployment_create(project=project, ref="a")
    deployment_create(project=project, ref="b")
    assert claim(older).decision is None  # it was superseded when the newer one came
    assert status_of(older) == ("cancelled", FailureReason.SUPERSEDED)
