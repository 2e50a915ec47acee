"""Environment history and rollback, with a real worker deploying a real git repository."""

import pytest

from deployments.errors import NothingToRollBack, NotRollbackTarget
from deployments.models import Deployment
from deployments.rollback import deployment_rollback
from deployments.services import deployment_create, deployment_retry
from jobs.models import AuditLog
from tests.api.conftest import assert_error
from tests.deployments.conftest import commit, log_text, run_git, wait_for
from webhooks.models import Event

pytestmark = pytest.mark.usefixtures("purge_broker")
DONE = ("success", "failed", "cancelled")


@pytest.fixture
def shop(make_project, git_repo, tmp_path):
    """A project deploying ``git_repo``; its step fails while ``tmp_path/broken`` exists."""
    flag = tmp_path / "broken"
    steps = [
        {"name": "show", "command": "echo deploying version $(cat VERSION)"},
        {"name": "check", "command": f"test ! -e {flag}"},
    ]
    project = make_project("shop", repo=str(git_repo), pipelines={"default": steps})
    project.flag = flag
    return project


def deploy(project, ref="main", **kwargs) -> Deployment:
    return wait_for(deployment_create(project=project, ref=ref, **kwargs), *DONE)


def test_history_and_current_after_a_success_a_failure_and_a_retry(
    shop, git_repo, deploy_worker, project_api
):
    deploy_worker()
    api = project_api("read", shop)
    first = deploy(shop)
    assert first.status == "success" and first.committed_at is not None
    shop.flag.write_text("1")
    commit(git_repo, "2")
    failed = deploy(shop)
    assert failed.status == "failed" and failed.commit_sha != first.commit_sha

    # The failure is in the history but the environment still runs the first deployment.
    env = api.get("/projects/shop/environments/production").json()
    assert env["current"]["id"] == first.pk and env["current"]["commit_sha"] == first.commit_sha
    assert env["latest"]["id"] == failed.pk
    assert [d["id"] for d in env["history"]] == [failed.pk, first.pk]
    assert [d["status"] for d in env["history"]] == ["failed", "success"]
    assert all(d["duration_seconds"] > 0 for d in env["history"])
    assert env["current"]["triggered_by"] == "system" and env["protected"] is False

    shop.flag.unlink()
    retried = wait_for(deployment_retry(deployment_id=failed.pk, triggered_by="alice"), *DONE)
    assert retried.status == "success" and retried.commit_sha == failed.commit_sha

    env = api.get("/projects/shop/environments/production").json()
    assert env["current"]["id"] == retried.pk and env["current"]["retry_of"] == failed.pk
    assert env["current"]["triggered_by"] == "alice" and env["deployments"] == 3
    assert [d["id"] for d in env["history"]] == [retried.pk, failed.pk, first.pk]
    listed = api.get("/projects/shop/environments").json()
    assert [e["name"] for e in listed] == ["production"]
    assert listed[0]["current"]["id"] == retried.pk

    # Paginated like the deployments list: newest first, Link to the next page.
    page = api.get("/projects/shop/environments/production", limit=2)
    assert [d["id"] for d in page.json()["history"]] == [retried.pk, failed.pk]
    assert f"before={failed.pk}" in page["Link"]
    assert_error(api.get("/projects/shop/environments/staging"), 404, "not_found")


def test_rollback_redeploys_the_last_good_commit_then_has_nothing_left(
    shop, git_repo, deploy_worker, project_api
):
    deploy_worker()
    api = project_api("deploy", shop)
    assert_error(
        api.post("/projects/shop/environments/production/rollback"), 409, "nothing_to_roll_back"
    )
    v1 = deploy(shop)
    assert_error(
        api.post("/projects/shop/environments/production/rollback"), 409, "nothing_to_roll_back"
    )
    v1_again = deploy(shop)  # the same commit again: not something to roll back to
    commit(git_repo, "2")
    v2 = deploy(shop)
    assert (v1.status, v1_again.status, v2.status) == ("success",) * 3
    assert v2.commit_sha != v1.commit_sha == v1_again.commit_sha

    headers = {"Idempotency-Key": "rollback-1"}
    response = api.post("/projects/shop/environments/production/rollback", headers=headers)
    assert response.status_code == 201, response.content
    body = response.json()
    # The newest success of the previous commit is the one restored.
    assert body["rollback_of"] == v1_again.pk and body["undoes"] == v2.pk
    assert body["commit_sha"] == v1.commit_sha and body["retry_of"] is None
    assert response["Location"] == f"/api/v1/deployments/{body['id']}"
    replay = api.post("/projects/shop/environments/production/rollback", headers=headers)
    assert replay.status_code == 201 and replay.json()["id"] == body["id"]
    assert Deployment.objects.filter(rollback_of__isnull=False).count() == 1

    rolled = wait_for(body["id"], *DONE)
    assert rolled.status == "success" and "deploying version 1" in log_text(rolled)
    created = [e.data for e in Event.objects.filter(type="deployment.created")]
    (announced,) = [data for data in created if data["deployment_id"] == rolled.pk]
    assert announced["rollback"] is True and announced["rollback_of"] == v1_again.pk
    assert not any(data["rollback"] for data in created if data["deployment_id"] != rolled.pk)
    assert AuditLog.objects.filter(action="deployment.rollback", target_id=str(v2.pk)).exists()
    env = api.get("/projects/shop/environments/production").json()
    assert env["current"]["id"] == rolled.pk and env["current"]["rollback_of"] == v1_again.pk

    # v2 was undone and everything older is the current commit: nothing left to go back to.
    with pytest.raises(NothingToRollBack):
        deployment_rollback(project=shop, environment="production")
    # Naming a deployment explicitly still works for any earlier success.
    forward = deployment_rollback(project=shop, environment="production", to_deployment_id=v2.pk)
    assert forward.commit_sha == v2.commit_sha and forward.rollback_of_id == v2.pk
    assert wait_for(forward, *DONE).status == "success"


def test_a_rollback_to_a_deployment_that_never_succeeded_is_refused(
    shop, git_repo, deploy_worker, project_api
):
    deploy_worker()
    api = project_api("deploy", shop)
    good = deploy(shop)
    commit(git_repo, "2")
    shop.flag.write_text("1")
    bad = deploy(shop)
    shop.flag.unlink()
    commit(git_repo, "3")
    current = deploy(shop)
    assert (good.status, bad.status, current.status) == ("success", "failed", "success")
    path = "/projects/shop/environments/production/rollback"

    refused = assert_error(api.post(path, {"deployment_id": bad.pk}), 409, "conflict")
    assert "never succeeded" in refused["message"]
    assert_error(api.post(path, {"deployment_id": current.pk}), 409, "conflict")
    assert_error(api.post(path, {"deployment_id": 999999}), 404, "not_found")
    assert_error(api.post(path, {"ref": "main"}), 422, "invalid")
    with pytest.raises(NotRollbackTarget):
        deployment_rollback(project=shop, environment="production", to_deployment_id=bad.pk)
    # The failed deployment is skipped when choosing the target by itself, too.
    chosen = api.post(path)
    assert chosen.status_code == 201 and chosen.json()["rollback_of"] == good.pk
    assert run_git(git_repo, "rev-parse", "HEAD~2") == chosen.json()["commit_sha"]
    assert_error(project_api("read", shop).post(path), 403, "forbidden")
