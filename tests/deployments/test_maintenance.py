"""Workspace fetch and worktree prune, with fixtures on both sides of every cutoff."""

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from deployments import workspaces
from deployments.git import resolve
from deployments.maintenance.fetch import fetch_workspaces
from deployments.maintenance.prune import prune_worktrees
from deployments.models import Workspace, Worktree
from deployments.services import deployment_create
from deployments.transitions import transition
from jobs.models import Notification
from tests.deployments.conftest import commit, run_git

THRESHOLD, LEAD = timedelta(days=30), timedelta(hours=72)


@pytest.fixture
def repo_project(make_project, git_repo, settings, tmp_path):
    settings.CONVEYOR_WORKSPACES_DIR = tmp_path / "workspaces"
    get_user_model().objects.create_user("ops", is_staff=True)
    return make_project(repo=str(git_repo))


def checkout(project, ref="main") -> Worktree:
    deployment = deployment_create(project=project, ref=ref)
    return workspaces.acquire(deployment, keep_alive=lambda: None).worktree


def notices(topic: str) -> list[dict]:
    return list(Notification.objects.filter(topic=topic).values_list("data", flat=True))


def test_fetch_brings_new_commits_and_announces_a_failure_once(repo_project, git_repo, tmp_path):
    checkout(repo_project)
    workspace = Workspace.objects.get()
    new_sha = commit(git_repo, "2")
    assert resolve(Path(workspace.path), "main") != new_sha
    assert fetch_workspaces().fetched == 1
    assert resolve(Path(workspace.path), "main") == new_sha

    moved = tmp_path / "moved-away"
    shutil.move(git_repo, moved)  # the remote disappears
    assert fetch_workspaces().failed == 1
    assert fetch_workspaces().failed == 1
    workspace.refresh_from_db()
    assert "fetch failed" in workspace.last_fetch_error
    assert len(notices("workspace.sync_failed")) == 1  # announced once, not every round
    shutil.move(moved, git_repo)
    assert fetch_workspaces().fetched == 1
    workspace.refresh_from_db()
    assert workspace.last_fetch_error == ""


def test_prune_warns_first_then_removes_only_idle_warned_unused_worktrees(repo_project, git_repo):
    trees = {"fresh": checkout(repo_project)}
    for name in ("due_warning", "warned_recently", "prunable", "in_use"):
        commit(git_repo, name)
        trees[name] = checkout(repo_project)
    now = timezone.now()
    warn_cutoff = now - (THRESHOLD - LEAD)
    hour = timedelta(hours=1)
    fields = {
        "fresh": {"last_used_at": warn_cutoff + hour},
        "due_warning": {"last_used_at": warn_cutoff - hour},
        "warned_recently": {
            "last_used_at": now - THRESHOLD - hour,
            "prune_warning_at": now - LEAD + hour,
        },
        "prunable": {"last_used_at": now - THRESHOLD - hour, "prune_warning_at": now - LEAD - hour},
        "in_use": {"last_used_at": now - THRESHOLD - hour, "prune_warning_at": now - LEAD - hour},
    }
    for name, values in fields.items():
        Worktree.objects.filter(pk=trees[name].pk).update(**values)
    running = deployment_create(project=repo_project, ref="main")
    transition(Q(pk=running.pk), "running", worktree=trees["in_use"])

    result = prune_worktrees(now=now)

    assert (result.warned, result.pruned, result.kept_in_use) == (1, 1, 1)
    remaining = {t.commit_sha: t for t in Worktree.objects.all()}
    assert trees["prunable"].commit_sha not in remaining
    assert not Path(trees["prunable"].path).exists()
    listed = run_git(Path(Workspace.objects.get().path), "worktree", "list")
    assert trees["prunable"].commit_sha not in listed
    for name in ("fresh", "due_warning", "warned_recently", "in_use"):
        assert trees[name].commit_sha in remaining and Path(trees[name].path).exists()
    assert remaining[trees["fresh"].commit_sha].prune_warning_at is None
    assert remaining[trees["due_warning"].commit_sha].prune_warning_at == now
    assert [n["commit"] for n in notices("worktree.prune_pending")] == [
        trees["due_warning"].commit_sha
    ]
    assert [n["commit"] for n in notices("worktree.pruned")] == [trees["prunable"].commit_sha]

    # Using a warned worktree clears its warning: the next round leaves it alone.
    checkout(repo_project, trees["due_warning"].commit_sha)
    assert Worktree.objects.get(pk=trees["due_warning"].pk).prune_warning_at is None


def test_log_purge_deletes_only_logs_past_the_retention(make_project):
    from deployments.maintenance.purge_logs import purge_logs
    from deployments.models import Deployment, LogChunk
    from deployments.runner.logwriter import LogWriter
    from deployments.runner.masking import SecretMasker
    from deployments.selectors import deployment_logs

    project = make_project()
    now = timezone.now()
    cutoff = now - timedelta(days=90)
    cases = {"old": cutoff - timedelta(hours=1), "recent": cutoff + timedelta(hours=1)}
    made = {}
    for name in ("old", "recent", "unfinished"):
        deployment = deployment_create(project=project, ref="main")
        writer = LogWriter(deployment.pk, SecretMasker([]))
        writer.write(b"x" * 200_000)  # a few chunks each
        writer.flush(final=True)
        if name in cases:
            transition(Q(pk=deployment.pk), "running")
            transition(Q(pk=deployment.pk), "success", finished_at=cases[name])
        made[name] = deployment
    result = purge_logs(now=now)
    assert (result.deployments, result.chunks) == (1, 4)
    assert not LogChunk.objects.filter(deployment=made["old"]).exists()
    assert LogChunk.objects.filter(deployment=made["recent"]).count() == 4
    assert LogChunk.objects.filter(deployment=made["unfinished"]).count() == 4
    assert Deployment.objects.filter(pk=made["old"].pk).exists()  # the deployment stays
    assert deployment_logs(made["old"]) == {"text": "", "next_offset": 0, "complete": True}
    assert purge_logs(now=now).chunks == 0
