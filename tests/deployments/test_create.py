"""Creating deployments: one transaction, idempotency keys, validation, domain errors."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from deployments.errors import (
    IdempotencyConflict,
    InvalidRequest,
    NotCancellable,
    PipelineNotFound,
    ProjectNotFound,
)
from deployments.models import Deployment
from deployments.selectors import deployment_as_dict
from deployments.services import deployment_cancel, deployment_claim, deployment_create
from jobs.maintenance.reaper import reap
from jobs.models import Job, JobReason, JobStatus
from jobs.services import job_bury, job_claim


def test_the_deployment_and_its_job_commit_or_roll_back_together(make_project):
    project = make_project()
    with pytest.raises(RuntimeError), transaction.atomic():
        deployment_create(project=project, ref="main")
        raise RuntimeError("the caller's transaction fails")
    assert not Deployment.objects.exists() and not Job.objects.exists()


def test_an_idempotency_key_replays_the_same_request_and_refuses_another(make_project):
    project = make_project()
    first = deployment_create(project=project, ref="main", idempotency_key="k-1")
    again = deployment_create(project=project, ref="main", idempotency_key="k-1")
    assert again.pk == first.pk and Deployment.objects.count() == 1
    with pytest.raises(IdempotencyConflict):
        deployment_create(project=project, ref="other", idempotency_key="k-1")
    other_key = deployment_create(project=project, ref="main", idempotency_key="k-2")
    assert other_key.pk != first.pk and Job.objects.count() == 2


@pytest.mark.parametrize(
    ("fields", "error", "field"),
    [
        ({"ref": "-rf"}, InvalidRequest, "ref"),
        ({"ref": "a..b"}, InvalidRequest, "ref"),
        ({"ref": ""}, InvalidRequest, "ref"),
        ({"ref": "main", "environment": "prod env"}, InvalidRequest, "environment"),
        ({"ref": "main", "params": {"bad-name": 1}}, InvalidRequest, "params.bad-name"),
        ({"ref": "main", "params": {"n": [1]}}, InvalidRequest, "params.n"),
        ({"ref": "main", "pipeline": "nope"}, PipelineNotFound, None),
    ],
)
def test_bad_requests_are_refused_before_anything_is_written(make_project, fields, error, field):
    project = make_project()
    with pytest.raises(error) as raised:
        deployment_create(project=project, **fields)
    if field:
        assert raised.value.field == field
    assert not Deployment.objects.exists()


def test_an_unknown_project_is_refused(db):
    with pytest.raises(ProjectNotFound):
        deployment_create(project="ghost", ref="main")


def test_defaults_come_from_the_project_and_the_json_has_the_contract_fields(make_project):
    project = make_project(default_environment="staging")
    deployment = deployment_create(project="app", ref="release/1.2", params={"n": 1})
    data = deployment_as_dict(deployment)
    assert {
        "id", "project", "environment", "ref", "commit_sha", "status", "failure_reason",
        "retry_of", "attempt", "created_at", "started_at", "finished_at",
    } <= set(data)  # fmt: skip
    assert (data["project"], data["environment"], data["pipeline"]) == (
        project.slug,
        "staging",
        "default",
    )
    assert (data["status"], data["attempt"], data["retry_of"]) == ("pending", 1, None)


def test_a_finished_deployment_cannot_be_cancelled(make_project):
    deployment = deployment_create(project=make_project(), ref="main")
    deployment_cancel(deployment_id=deployment.pk, actor="a")
    with pytest.raises(NotCancellable):
        deployment_cancel(deployment_id=deployment.pk, actor="a")


def running(project) -> tuple[Deployment, Job]:
    deployment = deployment_create(project=project, ref="main", triggered_by="ci")
    job = job_claim(deployment.job_id, worker="node@host/123")
    return deployment_claim(deployment_id=deployment.pk, job=job).deployment, job


def test_a_buried_job_fails_its_deployment_in_the_same_transaction(make_project):
    deployment, job = running(make_project())
    with pytest.raises(RuntimeError), transaction.atomic():
        job_bury(job_filter(job), error="WorkerLostError: gone", reason=JobReason.WORKER_LOST)
        deployment.refresh_from_db()
        assert (deployment.status, deployment.failure_reason) == ("failed", "worker_lost")
        raise RuntimeError("roll the burial back")
    deployment.refresh_from_db()
    assert deployment.status == "running"  # rolled back with the burial
    job_bury(job_filter(job), error="WorkerLostError: gone", reason=JobReason.WORKER_LOST)
    deployment.refresh_from_db()
    assert (deployment.status, deployment.failure_reason) == ("failed", "worker_lost")
    assert deployment.step_runs.get().status == "skipped"


def test_a_lease_expired_by_a_dead_host_fails_the_deployment_through_the_reaper(make_project):
    deployment, job = running(make_project())
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reap().dead == 1
    deployment.refresh_from_db()
    assert (deployment.status, deployment.failure_reason) == ("failed", "worker_lost")
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD


def job_filter(job):
    from django.db.models import Q

    return Q(pk=job.pk)
