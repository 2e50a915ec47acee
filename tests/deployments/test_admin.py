"""Admin: deployments with step runs and logs visible; cancel and retry call the services."""

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from deployments import lifecycle
from deployments.models import Deployment
from deployments.runner.logwriter import LogWriter
from deployments.runner.masking import SecretMasker
from deployments.services import deployment_claim, deployment_create
from jobs.services import job_claim


@pytest.fixture
def admin_client(client, db):
    user = get_user_model().objects.create_superuser("boss", "boss@example.com", "pw-123456")
    client.force_login(user)
    return client


def finished(project) -> Deployment:
    deployment = deployment_create(project=project, ref="main")
    job = job_claim(deployment.job_id, worker="w/1")
    running = deployment_claim(deployment_id=deployment.pk, job=job).deployment
    writer = LogWriter(running.pk, SecretMasker([]))
    writer.write(b"<b>step output</b>\n")
    writer.flush(final=True)
    with transaction.atomic():
        return lifecycle.finish(running, "failed", reason="step_failed", error="boom")


def test_the_change_page_shows_step_runs_and_the_escaped_log(admin_client, make_project):
    deployment = finished(make_project())
    page = admin_client.get(f"/admin/deployments/deployment/{deployment.pk}/change/")
    assert page.status_code == 200
    body = page.content.decode()
    # The log's text reaches the page as JSON data (json_script escapes < and >) that the
    # page's script puts in text nodes.
    assert "\\u003Cb\\u003Estep output\\u003C/b\\u003E" in body
    assert "<b>step output</b>" not in body
    assert "hello" in body and "A step failed" in body  # the step run and the reason
    listing = admin_client.get("/admin/deployments/deployment/?status=failed")
    assert listing.status_code == 200 and f">{deployment.pk}<" in listing.content.decode()


def test_the_project_page_never_shows_secret_values(admin_client, make_project):
    project = make_project(secrets={"API_TOKEN": "very-secret-value"})
    page = admin_client.get(f"/admin/deployments/project/{project.pk}/change/")
    assert page.status_code == 200
    assert "API_TOKEN" in page.content.decode()
    assert "very-secret-value" not in page.content.decode()


def test_cancel_and_retry_actions_call_the_services(admin_client, make_project):
    project = make_project()
    done = finished(project)
    waiting = deployment_create(project=project, ref="next")
    response = admin_client.post(
        "/admin/deployments/deployment/",
        {"action": "cancel_deployments", "_selected_action": [done.pk, waiting.pk]},
        follow=True,
    )
    text = response.content.decode()
    assert "1 deployment(s) cancelled" in text and "Refused" in text
    waiting.refresh_from_db()
    assert (waiting.status, waiting.failure_reason) == ("cancelled", "cancelled")

    admin_client.post(
        "/admin/deployments/deployment/",
        {"action": "retry_deployments", "_selected_action": [done.pk]},
    )
    retry = Deployment.objects.get(retry_of=done)
    assert (retry.attempt, retry.triggered_by, retry.status) == (2, "boss", "pending")
