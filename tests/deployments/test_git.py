"""Git: a deployment resolves its ref and runs in the worktree of that commit."""

from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from deployments.models import FailureReason, Worktree
from deployments.services import deployment_create, deployment_retry
from tests.deployments.conftest import commit, log_text, run_git, wait_for

SHOW = 'echo "head=$(git rev-parse HEAD) version=$(cat VERSION) dir=$(pwd)"'


def test_a_deployment_runs_in_a_worktree_of_its_resolved_commit(
    make_project, deploy_worker, git_repo
):
    first_sha = run_git(git_repo, "rev-parse", "HEAD")
    run_git(git_repo, "tag", "v1")
    project = make_project(
        repo=str(git_repo), pipelines={"default": [{"name": "show", "command": SHOW}]}
    )
    deploy_worker()

    first = wait_for(deployment_create(project=project, ref="main"), "success", "failed")
    assert first.status == "success", log_text(first)
    assert first.commit_sha == first_sha
    assert f"head={first_sha} version=1" in log_text(first)
    worktree = Worktree.objects.get(commit_sha=first_sha)
    assert first.worktree_id == worktree.pk and first.project_dir == worktree.path
    assert Path(worktree.path).name == first_sha and f"dir={worktree.path}" in log_text(first)

    second_sha = commit(git_repo, "2")  # main moves on; the next deployment fetches it
    second = wait_for(deployment_create(project=project, ref="main"), "success", "failed")
    assert second.commit_sha == second_sha and f"head={second_sha} version=2" in log_text(second)
    assert second.worktree_id != worktree.pk

    # A retry runs the same commit again, in the same worktree, which counts as used.
    stale = timezone.now() - timedelta(days=40)
    Worktree.objects.filter(pk=worktree.pk).update(last_used_at=stale, prune_warning_at=stale)
    retried = wait_for(deployment_retry(deployment_id=first.pk), "success", "failed")
    assert retried.commit_sha == first_sha and retried.worktree_id == worktree.pk
    assert f"head={first_sha} version=1" in log_text(retried)
    worktree.refresh_from_db()
    assert worktree.last_used_at > stale and worktree.prune_warning_at is None

    tagged = wait_for(deployment_create(project=project, ref="v1"), "success", "failed")
    assert tagged.commit_sha == first_sha and tagged.worktree_id == worktree.pk


def test_an_unknown_ref_fails_the_deployment_with_git_error(make_project, deploy_worker, git_repo):
    project = make_project(repo=str(git_repo))
    deploy_worker()
    done = wait_for(deployment_create(project=project, ref="no-such-branch"), "failed", "success")
    assert done.failure_reason == FailureReason.GIT_ERROR
    assert "no-such-branch" in log_text(done) and done.started_at is not None
    assert [r.status for r in done.step_runs.all()] == ["skipped"]


def test_a_tag_named_like_a_branch_does_not_deploy_in_the_branchs_place(
    make_project, deploy_worker, git_repo
):
    # git prefers refs/tags/main to refs/heads/main, so whoever may push a tag could deploy
    # an unreviewed commit to an environment whose refs rule admits only the main branch.
    from deployments.models import Environment

    main_sha = run_git(git_repo, "rev-parse", "HEAD")
    run_git(git_repo, "checkout", "--quiet", "-b", "unreviewed")
    unreviewed_sha = commit(git_repo, "evil")
    run_git(git_repo, "tag", "main", unreviewed_sha)
    run_git(git_repo, "checkout", "--quiet", "main")
    project = make_project(
        repo=str(git_repo), pipelines={"default": [{"name": "show", "command": SHOW}]}
    )
    Environment.objects.create(project=project, name="production", refs=["main"])
    deploy_worker()

    deployment = deployment_create(project=project, environment="production", ref="main")
    deployment = wait_for(deployment, "success", "failed")
    assert deployment.commit_sha != unreviewed_sha
    assert "version=evil" not in log_text(deployment)
    assert deployment.status == "failed"
    assert "names both a branch and a tag" in deployment.error
    assert deployment.commit_sha in ("", None, main_sha)
