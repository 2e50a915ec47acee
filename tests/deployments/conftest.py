"""Fixtures for the deployments tests: projects, deployment workers, git repos, waits."""

import subprocess
from pathlib import Path

import pytest

from deployments.models import Deployment, LogChunk
from tests.conftest import set_steps  # noqa: F401 - re-exported for the tests here
from tests.processes import wait_until


def wait_for(deployment: Deployment | int, *statuses: str, timeout: float = 60) -> Deployment:
    """Poll until the deployment is in one of ``statuses``; return it fresh."""
    pk = getattr(deployment, "pk", deployment)

    def reached():
        fresh = Deployment.objects.select_related("project").get(pk=pk)
        return fresh if fresh.status in statuses else None

    return wait_until(reached, timeout=timeout, message=f"deployment {pk} to be {statuses}")


def log_bytes(deployment: Deployment) -> bytes:
    chunks = LogChunk.objects.filter(deployment=deployment).order_by("sequence")
    return b"".join(bytes(data) for data in chunks.values_list("data", flat=True))


def log_text(deployment: Deployment) -> str:
    return log_bytes(deployment).decode(errors="replace")


def read_pids(path: Path) -> list[int]:
    """Return the pids a step wrote to ``path`` (one per line)."""
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split() if line.strip()]


def run_git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def git_repo(tmp_path):
    """Make a real git repository with one commit on ``main``; return its path."""
    repo = tmp_path / "origin"
    repo.mkdir()
    run_git(repo, "init", "--quiet", "--initial-branch=main")
    run_git(repo, "config", "user.email", "test@example.com")
    run_git(repo, "config", "user.name", "Test")
    (repo / "VERSION").write_text("1\n")
    run_git(repo, "add", "VERSION")
    run_git(repo, "commit", "--quiet", "-m", "first")
    return repo


def commit(repo: Path, version: str) -> str:
    """Commit ``version`` into VERSION; return the new commit's sha."""
    (repo / "VERSION").write_text(f"{version}\n")
    run_git(repo, "commit", "--quiet", "-am", f"version {version}")
    return run_git(repo, "rev-parse", "HEAD")
