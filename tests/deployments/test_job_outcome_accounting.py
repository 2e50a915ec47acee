"""A deployment's job, as the engine's accounting counts it.

A failed deployment's job succeeds (the runner did its work); the throughput chart counts it
as a failure, through the deployments owner's ``failed_job_ids`` hook. A retry of a
deployment whose job died supersedes that job: it is no longer a dead letter.
"""

from datetime import timedelta

from django.utils import timezone

from deployments.services import deployment_create, deployment_retry
from jobs.accounting import rollup, stats, tallies
from jobs.models import Job, JobStatus
from project.dashboard import throughput
from tests.deployments.conftest import wait_for


def test_a_failed_deployment_counts_as_a_failed_job_in_the_rollup_and_chart(
    make_project, deploy_worker
):
    project = make_project(
        pipelines={
            "default": [{"name": "fail", "command": "exit 1"}],
            "fine": [{"name": "ok", "command": "true"}],
        }
    )
    deploy_worker()
    failed = wait_for(deployment_create(project=project, ref="main"), "failed", "success")
    fine = deployment_create(project=project, ref="main", pipeline="fine")
    fine = wait_for(fine, "failed", "success")
    assert (failed.status, fine.status) == ("failed", "success")
    jobs = Job.objects.in_bulk([failed.job_id, fine.job_id])
    assert {job.status for job in jobs.values()} == {JobStatus.SUCCEEDED}  # both jobs succeed

    rollup.refresh()
    ended = stats.ended_since(timezone.now().replace(second=0) - timedelta(minutes=5))
    by_status = {status: figures.count for (_, task, status), figures in ended.items()}
    assert by_status == {JobStatus.SUCCEEDED: 1, rollup.OWNER_FAILED: 1}
    points = throughput("1h")["points"]
    assert (sum(p["succeeded"] for p in points), sum(p["failed"] for p in points)) == (1, 1)


def test_retrying_a_deployment_whose_job_died_supersedes_that_job(make_project, deploy_worker):
    project = make_project()
    deploy_worker()
    first = wait_for(deployment_create(project=project, ref="main"), "failed", "success")
    # As if the runner's worker had been lost on its last attempt.
    Job.objects.filter(pk=first.job_id).update(status=JobStatus.DEAD)
    tallies.fold()
    assert tallies.dead_letters_by_queue() == {"deployments": 1}

    second = wait_for(deployment_retry(deployment_id=first.pk), "failed", "success")
    assert second.job_id != first.job_id
    assert Job.objects.get(pk=first.job_id).superseded_at is not None
    assert tallies.dead_letters_by_queue() == {}
