"""scripts/conveyor-deploy against a live server: rollback, freezes and approvals."""

import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from deployments.approvals import deployment_reject
from deployments.environments import Approver
from deployments.models import Deployment, Environment
from deployments.services import deployment_create
from tests.api.test_ci_client import CLIENT, run_client
from tests.deployments.conftest import commit, wait_for
from tests.processes import wait_until

pytestmark = pytest.mark.usefixtures("purge_broker")


def test_the_client_rolls_back_and_reports_when_there_is_nothing_to_roll_back_to(
    live_server, make_project, project_api, deploy_worker, git_repo
):
    steps = [{"name": "show", "command": "echo deploying version $(cat VERSION)"}]
    project = make_project("shop", repo=str(git_repo), pipelines={"default": steps})
    token = project_api("deploy", project).headers["Authorization"].split()[1]
    deploy_worker()
    rollback = ("--project", "shop", "--environment", "production", "--rollback")

    started = time.monotonic()
    nothing = run_client(live_server, token, *rollback)
    assert nothing.returncode == 2 and "409 nothing_to_roll_back" in nothing.stderr
    assert time.monotonic() - started < 10  # refused at once, not retried like a busy key

    v1 = wait_for(deployment_create(project=project, ref="main"), "success")
    commit(git_repo, "2")
    wait_for(deployment_create(project=project, ref="main"), "success")
    rolled = run_client(live_server, token, *rollback)
    assert rolled.returncode == 0, rolled.stderr
    assert "deploying version 1" in rolled.stdout and "rollback" in rolled.stderr
    latest = Deployment.objects.order_by("-pk").first()
    assert latest.rollback_of_id == v1.pk and latest.status == "success"

    usage = run_client(live_server, token, "--project", "shop", "--rollback", "--ref", "main")
    assert usage.returncode == 2 and "--rollback takes no --ref" in usage.stderr


def test_the_client_cannot_sidestep_a_frozen_environment_by_spelling(
    live_server, make_project, project_api, deploy_worker
):
    project = make_project("shop")
    now = timezone.now()
    window = {
        "name": "code-freeze",
        "start": (now - timedelta(hours=1)).replace(tzinfo=None).isoformat(),
        "end": (now + timedelta(hours=1)).replace(tzinfo=None).isoformat(),
        "timezone": "UTC",
    }
    Environment.objects.create(project=project, name="production", freeze=[window])
    token = project_api("deploy", project).headers["Authorization"].split()[1]
    deploy_worker()
    frozen = run_client(
        live_server, token, "--project", "shop", "--environment", "PRODUCTION", "--ref", "main"
    )
    assert frozen.returncode == 2 and "environment_frozen" in frozen.stderr
    staged = run_client(
        live_server, token, "--project", "shop", "--environment", "Staging", "--ref", "main"
    )
    assert staged.returncode == 0, staged.stderr
    assert list(Deployment.objects.values_list("environment", flat=True)) == ["staging"]


def test_the_client_names_the_page_where_a_waiting_deployment_is_approved(
    live_server, make_project, project_api
):
    project = make_project("shop")
    Environment.objects.create(
        project=project, name="production", protected=True, required_approvals=1
    )
    token = project_api("deploy", project).headers["Authorization"].split()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_"))}
    env.update(CONVEYOR_URL=live_server.url + "/", CONVEYOR_TOKEN=token)
    client = subprocess.Popen(
        [sys.executable, CLIENT, "--poll", "1", "--project", "shop", "--ref", "main"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: Deployment.objects.filter(status="waiting_approval").exists(),
            message="the deployment to wait for approval",
        )
        waiting = Deployment.objects.get()
        reviewer = get_user_model().objects.create_superuser("rita", "rita@example.com", "pw")
        deployment_reject(
            deployment_id=waiting.pk, approver=Approver(name="rita", user=reviewer), comment="no"
        )
        _, stderr = client.communicate(timeout=60)
    finally:
        client.kill()
    page = f"{live_server.url}/admin/deployments/deployment/{waiting.pk}/change/"
    assert f"waiting for approval; approvers decide at {page}\n" in stderr, stderr
    assert client.returncode == 1 and "cancelled (rejected)" in stderr
