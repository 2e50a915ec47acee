"""Workspaces and worktrees: where a deployment's steps run, and at which commit.

A project with a ``repo`` keeps one bare clone per deployer host (its Workspace row for
``CONVEYOR_DEPLOYER_HOST``) under that host's ``CONVEYOR_WORKSPACES_DIR/<slug>/repo.git``.
A deployment fetches it, resolves its ref to a commit (a retry reuses the commit of the
deployment it retries) and runs in the git worktree of that commit,
``<slug>/worktrees/<sha>``, created once and reused by every deployment of the same commit
on that host. Acquire and release stamp ``last_used_at`` and clear ``prune_warning_at``.
Tracked files of a reused worktree are reset to the commit unless another deployment is
running in it; untracked files (build caches) are kept.

A project without a repo runs in its ``workdir`` (default ``<slug>/workdir``).

The clone's own ``origin`` (as its config on disk says) is checked against the project's
``repo`` before every fetch and re-pointed when it differs, whatever the Workspace row says:
a clone older than a change of repository (another host updated the row, a restored or
reset database) must never fetch, and deploy, the old repository's code.

Nothing under a workspace holds a repository password: the clone's ``origin`` is the URL
without credentials, which git gets at fetch time (deployments/git.py); a clone made before
that has its ``origin`` rewritten on its next fetch. The workspaces directory is 0700.

Git work on one project is serialized by a file lock (``<slug>/.lock``) among the workers
of one host; workspaces are per host, each deployer host clones its own and has rows of its
own, so its fetch and prune (deployments.maintenance) see exactly what is on its disk.
"""

import contextlib
import fcntl
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.utils import timezone

from deployments import conf
from deployments.git import GitError, git, remote_url, resolve, url_credentials
from deployments.models import ACTIVE, Deployment, FailureReason, Project, Workspace, Worktree
from project.redaction import redact_url
from project.secretfiles import private_dir

logger = logging.getLogger("deployments.workspaces")

WORKDIR_ERROR = FailureReason.WORKDIR_ERROR

LOCK_POLL_SECONDS = 0.2


class LockBusy(Exception):  # noqa: N818 - a condition, not a failure
    """The project's git lock is held by someone else (and we were told not to wait)."""


class CheckoutError(Exception):
    """The deployment's code could not be checked out (clone, fetch, unknown ref, disk)."""

    def __init__(self, message: str, *, reason: FailureReason = FailureReason.GIT_ERROR) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Checkout:
    path: Path
    commit_sha: str
    worktree: Worktree | None


def project_root(project: Project) -> Path:
    """Return the directory holding a project's clone, worktrees, workdir and lock."""
    return private_dir(conf.get().workspaces_dir) / project.slug


@contextlib.contextmanager
def project_lock(
    project: Project, keep_alive: Callable[[], None] | None = None, *, wait: bool = True
) -> Iterator[None]:
    """Hold the project's git file lock; call ``keep_alive`` while waiting for it.

    With ``wait=False``, raise LockBusy at once if someone else holds it.
    """
    root = project_root(project)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait:
                    raise LockBusy(project.slug) from None
                if keep_alive is not None:
                    keep_alive()
                time.sleep(LOCK_POLL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def acquire(deployment: Deployment, *, keep_alive: Callable[[], None]) -> Checkout:
    """Return where ``deployment`` runs: its project's workdir, or a worktree of its commit."""
    project = deployment.project
    if not project.repo:
        path = Path(project.workdir) if project.workdir else project_root(project) / "workdir"
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckoutError(f"workdir {path}: {exc}", reason=WORKDIR_ERROR) from exc
        return Checkout(path=path, commit_sha="", worktree=None)
    try:
        with project_lock(project, keep_alive):
            workspace = _workspace(project, keep_alive)
            sha = _commit(workspace, deployment, keep_alive)
            worktree = _worktree(workspace, sha, deployment, keep_alive)
            _record_commit_time(workspace, sha, deployment)
    except GitError as exc:
        Workspace.objects.filter(project=project, host=conf.get().deployer_host).update(
            last_fetch_error=str(exc)[:2000]
        )
        raise CheckoutError(str(exc)) from exc
    except OSError as exc:  # the workspaces directory itself (permissions, full disk)
        raise CheckoutError(f"workspace: {exc}", reason=WORKDIR_ERROR) from exc
    return Checkout(path=Path(worktree.path), commit_sha=sha, worktree=worktree)


def release(worktree: Worktree | None) -> None:
    """Mark a worktree used just now (its idle time starts again)."""
    if worktree is not None:
        Worktree.objects.filter(pk=worktree.pk).update(
            last_used_at=timezone.now(), prune_warning_at=None
        )


def _workspace(project: Project, keep_alive) -> Workspace:
    repo_path = project_root(project) / "repo.git"
    workspace, _ = Workspace.objects.get_or_create(
        project=project,
        host=conf.get().deployer_host,
        defaults={"path": str(repo_path), "repo": project.repo},
    )
    if not (repo_path / "HEAD").exists():
        if repo_path.exists():
            shutil.rmtree(repo_path)
        git(
            "clone", "--bare", "--quiet", "--", remote_url(project.repo), str(repo_path),
            keep_alive=keep_alive,
            credentials=url_credentials(project.repo),
        )  # fmt: skip
        workspace.last_fetched_at = timezone.now()
    else:
        workspace.path, workspace.repo = str(repo_path), project.repo
        _set_origin(workspace)  # a changed repo, or an older clone whose config kept a password
    workspace.path, workspace.repo, workspace.last_fetch_error = str(repo_path), project.repo, ""
    workspace.gone_at = None  # its host is here, using it
    workspace.save()
    return workspace


def fetch(workspace: Workspace, keep_alive: Callable[[], None] | None = None) -> None:
    """Bring the workspace's branches and tags up to date with its project's repository.

    The project's ``repo`` is read afresh (the row's copy may be stale) and the clone's
    ``origin`` on disk re-pointed to it first.
    """
    repo = Project.objects.filter(pk=workspace.project_id).values_list("repo", flat=True).first()
    if repo and repo != workspace.repo:
        workspace.repo = repo
        Workspace.objects.filter(pk=workspace.pk).update(repo=repo)
    _set_origin(workspace)
    git(
        "fetch", "--quiet", "--prune", "--force", "--tags", "origin",
        "+refs/heads/*:refs/heads/*",
        cwd=workspace.path,
        keep_alive=keep_alive,
        credentials=url_credentials(workspace.repo),
    )  # fmt: skip
    Workspace.objects.filter(pk=workspace.pk).update(
        last_fetched_at=timezone.now(), last_fetch_error=""
    )


def _set_origin(workspace: Workspace) -> None:
    """Point the clone's ``origin`` at the workspace's repo, credentials left out.

    This also rewrites the config of a clone made when ``origin`` kept the password.
    """
    wanted = remote_url(workspace.repo)
    try:
        current = git("config", "--get", "remote.origin.url", cwd=workspace.path).strip()
    except GitError:
        current = None
    if current != wanted:
        if current is not None:
            logger.warning(
                "workspace.origin_repointed",
                extra={
                    "path": workspace.path,
                    "was": redact_url(current),
                    "now": redact_url(workspace.repo),
                },
            )
        git("remote", "set-url", "origin", wanted, cwd=workspace.path)


def _commit(workspace: Workspace, deployment: Deployment, keep_alive) -> str:
    repo = Path(workspace.path)
    if deployment.commit_sha:  # a retry: the same commit as before
        sha = resolve(repo, deployment.commit_sha)
        if sha is None:
            fetch(workspace, keep_alive)
            sha = resolve(repo, deployment.commit_sha)
    else:
        fetch(workspace, keep_alive)
        sha = resolve(repo, deployment.ref)
    if sha is None:
        wanted = deployment.commit_sha or deployment.ref
        raise GitError(f"{wanted!r} is not a branch, tag or commit of {redact_url(workspace.repo)}")
    return sha


def _record_commit_time(workspace: Workspace, sha: str, deployment: Deployment) -> None:
    """Store the commit's committer time on the deployment (DORA lead time reads it)."""
    try:
        stamp = git("show", "-s", "--format=%cI", sha, cwd=workspace.path).strip()
        committed_at = datetime.fromisoformat(stamp)
    except (GitError, ValueError):
        return  # lead time skips this deployment; the deployment itself is unaffected
    deployment.committed_at = committed_at
    Deployment.objects.filter(pk=deployment.pk).update(committed_at=committed_at)


def _worktree(workspace: Workspace, sha: str, deployment: Deployment, keep_alive) -> Worktree:
    path = Path(workspace.path).parent / "worktrees" / sha
    existing = Worktree.objects.filter(workspace=workspace, commit_sha=sha).first()
    if not (path / ".git").exists():
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        git("worktree", "prune", cwd=workspace.path)
        git(
            "worktree",
            "add",
            "--detach",
            "--force",
            "--quiet",
            str(path),
            sha,
            cwd=workspace.path,
            keep_alive=keep_alive,
        )
    elif existing is None or not _in_use(existing, deployment):
        git("reset", "--hard", "--quiet", sha, cwd=path, keep_alive=keep_alive)
    worktree, _ = Worktree.objects.update_or_create(
        workspace=workspace,
        commit_sha=sha,
        defaults={"path": str(path), "last_used_at": timezone.now(), "prune_warning_at": None},
    )
    return worktree


def _in_use(worktree: Worktree, deployment: Deployment) -> bool:
    return (
        Deployment.objects.filter(worktree=worktree, status__in=ACTIVE)
        .exclude(pk=deployment.pk)
        .exists()
    )
