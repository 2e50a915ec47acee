"""Two deployer hosts on this machine: own workspaces, own fetch and prune rounds, gone marks.

Each worker process gets its own CONVEYOR_DEPLOYER_HOST, CONVEYOR_DEPLOYER_TAGS and
CONVEYOR_WORKSPACES_DIR, as two machines would have.
"""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from deployments.git import resolve
from deployments.maintenance.hosts import fan_out
from deployments.models import Deployer, FailureReason, Workspace, Worktree
from deployments.selectors import deployment_as_dict
from deployments.services import deployment_create
from deployments.tasks import FETCH_HOST, PRUNE_HOST
from deployments.timeline import deployment_timeline
from jobs.models import MaintenanceRun
from tests.deployments.conftest import commit, log_text, wait_for
from tests.processes import wait_until

FAST = {
    "CONVEYOR_WORKER_HEARTBEAT": "1s",
    "CONVEYOR_DEPLOYER_GONE_AFTER": "3s",
    "CONVEYOR_RUNS_ON_WAIT": "4s",
}


@pytest.fixture
def hosts(deploy_worker, settings, tmp_path):
    """Start deployer workers ``alpha`` (linux) and ``beta`` (linux, gpu); return them."""
    settings.CONVEYOR_DEPLOYER_GONE_AFTER = timedelta(seconds=3)

    def env(host: str, tags: str) -> dict:
        return {
            **FAST,
            "CONVEYOR_DEPLOYER_HOST": host,
            "CONVEYOR_DEPLOYER_TAGS": tags,
            "CONVEYOR_WORKSPACES_DIR": str(tmp_path / f"ws-{host}"),
        }

    started = {
        "alpha": deploy_worker(env=env("alpha", "linux"), name="alpha"),
        "beta": deploy_worker(env=env("beta", "gpu, Linux"), name="beta"),
    }
    wait_until(lambda: Deployer.objects.count() >= 2, message="both deployers to beat")
    return started


def _round_ran(runner: str, after) -> bool:
    return MaintenanceRun.objects.filter(runner=runner, started_at__gte=after).exists()


def test_two_hosts_keep_their_own_workspaces_rounds_and_are_marked_gone(
    hosts, make_project, git_repo, tmp_path
):
    deployers = {d.host: d for d in Deployer.objects.all()}
    assert deployers["alpha"].tags == ["linux"] and deployers["beta"].tags == ["gpu", "linux"]
    assert deployers["alpha"].workspaces_dir == str(tmp_path / "ws-alpha")
    assert deployers["alpha"].free_disk_bytes > 0 and deployers["beta"].gone_at is None

    # Two deployments at once (two environments), each worker takes one at a time: one each.
    project = make_project(
        repo=str(git_repo), pipelines={"default": [{"name": "slow", "command": "sleep 3"}]}
    )
    first = deployment_create(project=project, ref="main", environment="staging")
    second = deployment_create(project=project, ref="main", environment="qa")
    for deployment in (first, second):
        done = wait_for(deployment, "success", "failed")
        assert done.status == "success", log_text(done)
    spaces = {w.host: w for w in Workspace.objects.filter(project=project)}
    assert sorted(spaces) == ["alpha", "beta"]
    for host, workspace in spaces.items():
        assert Path(workspace.path).is_relative_to(tmp_path / f"ws-{host}")
        assert (Path(workspace.path) / "HEAD").exists()
    trees = {t.workspace.host: t for t in Worktree.objects.select_related("workspace")}
    assert sorted(trees) == ["alpha", "beta"]
    assert trees["alpha"].commit_sha == trees["beta"].commit_sha
    assert Path(trees["beta"].path).is_relative_to(tmp_path / "ws-beta")

    # A fetch round on each host, each fetching its own clone.
    new_sha = commit(git_repo, "2")
    started = timezone.now()
    assert fan_out(FETCH_HOST).enqueued == 2
    for host in ("alpha", "beta"):
        wait_until(
            lambda host=host: resolve(Path(spaces[host].path), "main") == new_sha,
            message=f"{host}'s clone to be fetched",
        )
        wait_until(lambda host=host: _round_ran(f"fetch_workspaces@{host}", started))

    # Only alpha's copy is idle and warned: alpha's round removes it; beta's keeps beta's.
    now = timezone.now()
    Worktree.objects.filter(pk=trees["alpha"].pk).update(
        last_used_at=now - timedelta(days=31), prune_warning_at=now - timedelta(days=4)
    )
    started = timezone.now()
    assert fan_out(PRUNE_HOST).enqueued == 2
    wait_until(lambda: _round_ran("prune_worktrees@alpha", started))
    wait_until(lambda: _round_ran("prune_worktrees@beta", started))
    assert not Path(trees["alpha"].path).exists() and Path(trees["beta"].path).exists()
    assert list(Worktree.objects.values_list("pk", flat=True)) == [trees["beta"].pk]
    runs = {r.runner: r.counts for r in MaintenanceRun.objects.filter(started_at__gte=started)}
    assert runs["prune_worktrees@alpha"]["pruned"] == 1
    assert runs["prune_worktrees@beta"]["pruned"] == 0

    # beta stops: alpha's beats mark it gone, and its workspace row with it (kept).
    hosts["beta"].stop()
    wait_until(
        lambda: Deployer.objects.filter(host="beta", gone_at__isnull=False).exists(),
        timeout=30,
        message="beta to be marked gone",
    )
    assert Workspace.objects.get(host="beta").gone_at is not None
    assert Workspace.objects.get(host="alpha").gone_at is None
    assert Deployer.objects.get(host="alpha").gone_at is None
    assert fan_out(FETCH_HOST).hosts == 1  # rounds go to live hosts only


def test_runs_on_routes_to_the_tagged_host_only_and_an_unmatched_one_fails_after_its_wait(
    hosts, make_project, git_repo, admin_client
):
    gpu = make_project("gpu", repo=str(git_repo), runs_on=["gpu"])
    done = []
    for environment in ("staging", "qa", "production", "demo"):
        deployment = deployment_create(project=gpu, ref="main", environment=environment)
        done.append(wait_for(deployment, "success", "failed"))
    assert [d.status for d in done] == ["success"] * 4, [log_text(d) for d in done]
    assert {d.worker.split("@")[0] for d in done} == {"beta"}  # only beta has the gpu tag
    assert list(Workspace.objects.filter(project=gpu).values_list("host", flat=True)) == ["beta"]
    assert all(deployment_as_dict(d)["waiting_for"] is None for d in done)

    # No live host has "arm": the deployment says what it waits for, then fails with why.
    arm = make_project("arm", runs_on=["arm", "linux"])
    deployment = deployment_create(project=arm, ref="main")
    waiting = wait_until(
        lambda: deployment_as_dict(type(deployment).objects.get(pk=deployment.pk))["waiting_for"],
        timeout=30,
        message="the deployment to say what it waits for",
    )
    assert "arm, linux" in waiting
    page = admin_client.get(f"/admin/deployments/deployment/{deployment.pk}/change/").text
    assert 'id="waiting-for"' in page and "arm, linux" in page
    failed = wait_for(deployment, "failed", "success", timeout=30)
    assert failed.failure_reason == FailureReason.NO_DEPLOYER
    assert "arm, linux" in failed.error and failed.started_at is None
    kinds = [event["kind"] for event in deployment_timeline(failed)]
    assert kinds.index("waiting_for_deployer") < kinds.index("finished")
    assert deployment_as_dict(failed)["failure_reason"] == "no_deployer"
    assert (failed.finished_at - failed.waiting_since).total_seconds() >= 4
