"""Workspaces and worktrees are per deployer host; fetch and prune touch their own host's only."""

from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from deployments import workspaces
from deployments.git import resolve
from deployments.maintenance.fetch import fetch_workspaces
from deployments.maintenance.prune import prune_worktrees
from deployments.models import Workspace, Worktree
from deployments.services import deployment_create
from tests.deployments.conftest import commit


def _on_host(settings, tmp_path, host: str) -> None:
    settings.CONVEYOR_DEPLOYER_HOST = host
    settings.CONVEYOR_WORKSPACES_DIR = tmp_path / f"workspaces-{host}"


def _checkout(project) -> Worktree:
    deployment = deployment_create(project=project, ref="main")
    return workspaces.acquire(deployment, keep_alive=lambda: None).worktree


def test_each_host_has_its_own_rows_and_fetches_and_prunes_only_them(
    make_project, git_repo, settings, tmp_path
):
    project = make_project(repo=str(git_repo))
    trees = {}
    for host in ("alpha", "beta"):
        _on_host(settings, tmp_path, host)
        trees[host] = _checkout(project)
    spaces = {w.host: w for w in Workspace.objects.filter(project=project)}
    assert sorted(spaces) == ["alpha", "beta"]
    assert spaces["alpha"].path.startswith(str(tmp_path / "workspaces-alpha"))
    assert trees["alpha"].workspace_id == spaces["alpha"].pk
    assert trees["alpha"].commit_sha == trees["beta"].commit_sha  # one commit, two copies
    assert trees["alpha"].pk != trees["beta"].pk

    new_sha = commit(git_repo, "2")
    _on_host(settings, tmp_path, "alpha")
    assert fetch_workspaces().fetched == 1
    assert resolve(Path(spaces["alpha"].path), "main") == new_sha
    assert resolve(Path(spaces["beta"].path), "main") != new_sha  # beta fetches on beta

    # Both copies idle past the threshold and warned: alpha's round removes alpha's only.
    now = timezone.now()
    Worktree.objects.update(
        last_used_at=now - timedelta(days=31), prune_warning_at=now - timedelta(days=4)
    )
    result = prune_worktrees(now=now)
    assert (result.pruned, result.skipped_elsewhere) == (1, 0)
    assert not Path(trees["alpha"].path).exists() and Path(trees["beta"].path).exists()
    assert list(Worktree.objects.values_list("pk", flat=True)) == [trees["beta"].pk]
