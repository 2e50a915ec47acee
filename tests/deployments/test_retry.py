"""Retry is a new deployment linked to the old; the steps snapshot never follows edits."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from deployments.errors import NotRetryable
from deployments.models import Deployment, Environment
from deployments.services import deployment_create, deployment_retry
from project.access.tokens import token_create
from tests.api.conftest import Api
from tests.deployments.conftest import log_text, set_steps, wait_for


def test_only_a_finished_deployment_can_be_retried(make_project):
    deployment = deployment_create(project=make_project(), ref="main")
    with pytest.raises(NotRetryable):
        deployment_retry(deployment_id=deployment.pk, triggered_by="alice")
    assert Deployment.objects.count() == 1


def test_retry_lineage_and_the_snapshot_survive_a_pipeline_edit(make_project, deploy_worker):
    project = make_project(
        pipelines={"default": [{"name": "say", "command": "echo old-command; exit 1"}]}
    )
    first = deployment_create(project=project, ref="v1", params={"n": 1}, triggered_by="ci")
    # The pipeline is edited while the deployment waits: it must still run what was asked.
    set_steps(project.pipelines.get(name="default"), [{"name": "say", "command": "echo new"}])
    deploy_worker()
    first = wait_for(first, "failed", "success")
    assert first.status == "failed" and "old-command" in log_text(first)

    second = deployment_retry(deployment_id=first.pk, triggered_by="alice")
    assert (second.retry_of_id, second.attempt, second.triggered_by) == (first.pk, 2, "alice")
    assert second.steps == first.steps and second.params == {"n": 1} and second.ref == "v1"
    second = wait_for(second, "failed", "success")
    assert "old-command" in log_text(second) and "new" not in log_text(second).split()

    third = wait_for(deployment_retry(deployment_id=second.pk), "failed", "success")
    assert (third.retry_of_id, third.attempt) == (second.pk, 3)

    fresh = wait_for(deployment_create(project=project, ref="v1"), "failed", "success")
    assert fresh.status == "success" and fresh.attempt == 1 and fresh.retry_of_id is None
    assert "new" in log_text(fresh).split()


def test_a_job_retry_into_a_protected_environment_answers_the_waiting_deployment(
    make_project, deploy_worker
):
    project = make_project(pipelines={"default": [{"name": "fail", "command": "exit 1"}]})
    deploy_worker()
    failed = wait_for(deployment_create(project=project, ref="main"), "failed", "success")
    assert failed.status == "failed" and failed.job_id is not None
    Environment.objects.create(
        project=project, name="production", protected=True, required_approvals=1
    )

    _, raw = token_create(name="ops", scope="admin")
    answer = Api(raw).post(f"/jobs/{failed.job_id}/retry")
    assert answer.status_code == 202, answer.content
    body = answer.json()
    retry = Deployment.objects.get(retry_of=failed)  # exactly one retry was made
    assert body["job"] is None
    assert body["created"]["kind"] == "deployment" and body["created"]["id"] == retry.pk
    assert body["created"]["status"] == "waiting_approval" and retry.job_id is None
    assert answer["Location"] == f"/api/v1/deployments/{retry.pk}"

    # The Jobs page's retry button does the same and shows the new deployment.
    admin = get_user_model().objects.create_superuser("root", password="x-123456")
    console = Client()
    console.force_login(admin)
    clicked = console.post(f"/admin/jobs/job/{failed.job_id}/retry/")
    newest = Deployment.objects.exclude(pk__in=[failed.pk, retry.pk]).get()
    assert clicked.status_code == 302 and clicked["Location"].endswith(
        f"/deployments/deployment/{newest.pk}/change/"
    )
    assert newest.status == "waiting_approval" and newest.triggered_by_user == admin
