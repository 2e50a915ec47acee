"""scripts/conveyor-deploy against a live server and a real worker, as a CI job runs it."""

import os
import subprocess
import sys

import pytest

from deployments.models import Deployment
from tests.processes import ROOT

pytestmark = pytest.mark.usefixtures("purge_broker")
CLIENT = str(ROOT / "scripts" / "conveyor-deploy")


def run_client(live_server, token: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_"))}
    env.update(CONVEYOR_URL=live_server.url, CONVEYOR_TOKEN=token)
    return subprocess.run(
        [sys.executable, CLIENT, "--poll", "5", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_client_follows_a_deployment_to_its_outcome(
    live_server, make_project, project_api, deploy_worker
):
    project = make_project(
        "shop",
        pipelines={
            "default": [
                {"name": "build", "command": "echo building $CONVEYOR_REF; sleep 1; echo built"}
            ],
            "broken": [{"name": "fail", "command": "echo about to fail; exit 3"}],
        },
    )
    token = project_api("deploy", project).headers["Authorization"].split()[1]
    deploy_worker()

    ok = run_client(live_server, token, "--project", "shop", "--ref", "main")
    assert ok.returncode == 0, ok.stderr
    assert "building main" in ok.stdout and "built" in ok.stdout
    assert "success" in ok.stderr

    failed = run_client(
        live_server, token, "--project", "shop", "--ref", "main", "--pipeline", "broken"
    )
    assert failed.returncode == 1, failed.stderr
    assert "about to fail" in failed.stdout and "failed (step_failed)" in failed.stderr

    # A CI step retried with the same key re-attaches to its deployment instead of starting another.
    before = Deployment.objects.count()
    env_args = ("--project", "shop", "--ref", "main", "--idempotency-key", "gh-123-1")
    first = run_client(live_server, token, *env_args)
    second = run_client(live_server, token, *env_args)
    assert first.returncode == second.returncode == 0
    assert Deployment.objects.count() == before + 1


def test_the_client_exits_2_on_usage_and_api_errors(live_server, make_project, project_api):
    token = project_api("deploy", make_project("shop")).headers["Authorization"].split()[1]
    assert run_client(live_server, token, "--project", "shop").returncode == 2  # no --ref
    bad_token = run_client(live_server, "cvy_wrong", "--project", "shop", "--ref", "main")
    assert bad_token.returncode == 2 and "401" in bad_token.stderr
    unknown = run_client(live_server, token, "--project", "nope", "--ref", "main")
    assert unknown.returncode == 2 and "404" in unknown.stderr
