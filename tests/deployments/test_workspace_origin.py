"""A clone's own remote is checked on every use, whatever the Workspace row says."""

import subprocess

import pytest

from deployments import conf, workspaces
from deployments.maintenance.fetch import fetch_workspaces
from deployments.models import Workspace
from deployments.services import deployment_create
from tests.deployments.conftest import commit, run_git


@pytest.fixture
def old_repo(tmp_path):
    """Another repository, with a different history: the project's repo before a change."""
    repo = tmp_path / "old-origin"
    repo.mkdir()
    run_git(repo, "init", "--quiet", "--initial-branch=main")
    run_git(repo, "config", "user.email", "test@example.com")
    run_git(repo, "config", "user.name", "Test")
    (repo / "VERSION").write_text("old\n")
    run_git(repo, "add", "VERSION")
    run_git(repo, "commit", "--quiet", "-m", "old history")
    return repo


def _stale_clone(project, old_repo, *, row_repo: str) -> Workspace:
    """Clone ``old_repo`` where the project's clone lives, with a row saying ``row_repo``."""
    path = workspaces.project_root(project) / "repo.git"
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "--bare", "--quiet", str(old_repo), str(path)], check=True)
    return Workspace.objects.create(
        project=project, host=conf.get().deployer_host, path=str(path), repo=row_repo
    )


def test_a_clone_whose_origin_is_an_old_repository_deploys_the_new_ones_commit(
    make_project, git_repo, old_repo, settings, tmp_path
):
    settings.CONVEYOR_WORKSPACES_DIR = tmp_path / "workspaces"
    project = make_project(repo=str(git_repo))
    # The row already names the new repository (another host updated it; a reset database).
    _stale_clone(project, old_repo, row_repo=str(git_repo))
    new_sha = run_git(git_repo, "rev-parse", "HEAD")
    assert new_sha != run_git(old_repo, "rev-parse", "HEAD")

    deployment = deployment_create(project=project, ref="main")
    checkout = workspaces.acquire(deployment, keep_alive=lambda: None)
    assert checkout.commit_sha == new_sha
    assert (checkout.path / "VERSION").read_text() == "1\n"
    origin = run_git(workspaces.project_root(project) / "repo.git", "remote", "get-url", "origin")
    assert origin == str(git_repo)


def test_the_fetch_runner_fetches_the_projects_repository_not_the_rows(
    make_project, git_repo, old_repo, settings, tmp_path
):
    settings.CONVEYOR_WORKSPACES_DIR = tmp_path / "workspaces"
    project = make_project(repo=str(git_repo))
    workspace = _stale_clone(project, old_repo, row_repo=str(old_repo))
    new_sha = commit(git_repo, "2")

    assert fetch_workspaces().fetched == 1
    assert run_git(workspace.path, "rev-parse", "refs/heads/main") == new_sha
    workspace.refresh_from_db()
    assert workspace.repo == str(git_repo)


def test_re_pointing_logs_the_change_without_the_password(
    make_project, old_repo, settings, tmp_path, caplog
):
    settings.CONVEYOR_WORKSPACES_DIR = tmp_path / "workspaces"
    new = "https://deploy:s3cret-token@git.example.com/new.git"
    project = make_project(repo=new)
    workspace = _stale_clone(project, old_repo, row_repo=new)
    with caplog.at_level("WARNING", logger="deployments.workspaces"):
        workspaces._set_origin(workspace)
    origin = run_git(workspace.path, "remote", "get-url", "origin")
    assert origin == "https://git.example.com/new.git"  # no credentials on disk
    [record] = [r for r in caplog.records if r.getMessage() == "workspace.origin_repointed"]
    assert record.was == str(old_repo) and "git.example.com/new.git" in record.now
    assert "s3cret" not in record.now and "s3cret" not in caplog.text
