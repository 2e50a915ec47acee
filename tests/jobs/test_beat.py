"""Seed 003's acceptance checklist, automated: a real ``celery beat`` on second-scale intervals
and real workers. Plus: two beats at once, and a runner that raises."""

import itertools
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from deployments.models import Workspace, Worktree
from jobs import services
from jobs.models import Job, JobStatus, MaintenanceRun, Notification
from tests.deployments.conftest import run_git
from tests.deployments.test_maintenance import checkout
from tests.processes import free_port, wait_until
from tests.webhooks.conftest import WORKER_ENV as WEBHOOK_ENV
from webhooks import services as webhook_services
from webhooks.models import Delivery, DeliveryStatus

pytestmark = pytest.mark.slow
MAINTENANCE = "maintenance"


def with_host_rounds(settings, queues: str) -> str:
    """``queues`` and this host's own deployer queue, where beat's fetch and prune rounds go.

    Fetch and prune run on each deployer host (deployments.maintenance.hosts); the worker
    consumes only its host's queue, not ``deployments``, so the checkouts run no deployment.
    """
    return f"{queues},deployments.host.{settings.CONVEYOR_DEPLOYER_HOST}"


def schedule(task: str, seconds: int) -> None:
    """Put ``maintenance.<task>`` on the beat schedule every ``seconds``."""
    every, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
    PeriodicTask.objects.create(
        name=f"test: {task}", task=f"maintenance.{task}", interval=every, queue=MAINTENANCE
    )


def runs_of(runner: str):
    return MaintenanceRun.objects.filter(runner=runner).order_by("started_at")


def wait_runs(runner: str, count: int, timeout: float = 60) -> list[MaintenanceRun]:
    return wait_until(
        lambda: len(found := list(runs_of(runner))) >= count and found,
        timeout=timeout,
        message=f"{count} recorded runs of {runner}",
    )


@pytest.fixture
def git_repo(tmp_path) -> Path:
    """A real git repository with one commit on ``main``."""
    repo = tmp_path / "origin"
    repo.mkdir()
    run_git(repo, "init", "--quiet", "--initial-branch=main")
    run_git(repo, "config", "user.email", "test@example.com")
    run_git(repo, "config", "user.name", "Test")
    (repo / "VERSION").write_text("1\n")
    run_git(repo, "add", "VERSION")
    run_git(repo, "commit", "--quiet", "-m", "first")
    return repo


@pytest.fixture
def allow_private(settings):
    """Let the test process save an endpoint on the loopback address."""
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True


def endpoint(url: str):
    return webhook_services.endpoint_create(url=url, topics=["workspace.sync_failed"])


@pytest.fixture
def staff(django_user_model):
    return [django_user_model.objects.create_user(f"ops{i}", is_staff=True) for i in range(2)]


def test_two_beats_run_each_runner_once_per_interval_and_a_raising_runner_stops_no_other(
    start_worker, start_beat
):
    schedule("reap_jobs", 3)
    schedule("tests_broken", 3)
    worker = start_worker(queues=MAINTENANCE, concurrency=2)
    beats = [start_beat(), start_beat()]
    time.sleep(14)
    for beat in beats:
        beat.stop()
    time.sleep(1)  # the last tick in flight

    sent = sum(beat.sent("maintenance.reap_jobs") for beat in beats)
    reaps = list(runs_of("reap_jobs"))
    assert all(beat.sent("maintenance.reap_jobs") >= 3 for beat in beats)  # both ticked
    assert len(reaps) >= 3 and len(reaps) < sent, (len(reaps), sent)  # twin ticks skipped
    span = (reaps[-1].started_at - reaps[0].started_at).total_seconds()
    assert len(reaps) - 1 <= span / 3 + 1, (len(reaps), span)  # about one run per interval
    gaps = [(b.started_at - a.finished_at).total_seconds() for a, b in itertools.pairwise(reaps)]
    assert min(gaps) >= 1.5, gaps  # never twice within half an interval
    skipped = worker.events("maintenance.skipped")
    assert any(line["runner"] == "reap_jobs" for line in skipped)
    assert {line["reason"] for line in skipped} <= {
        "another run of this runner holds its lock",
        "the last completed run was less than half an interval ago",
    }

    broken = list(runs_of("tests_broken"))
    assert len(broken) >= 3
    assert all(run.error.startswith("ZeroDivisionError") for run in broken)
    assert not any(run.error for run in reaps)
    assert sum(run.started_at > broken[0].finished_at for run in reaps) >= 2  # others go on
    # The worker's registry thread also runs account_jobs (jobs.worker_registry): not one of these.
    scheduled = [e for e in worker.events("maintenance.run") if e["runner"] != "account_jobs"]
    assert len(scheduled) == len(reaps) + len(broken)


@pytest.fixture
def failing_workspace(make_project, git_repo, settings, tmp_path, staff):
    """A project whose workspace is cloned here, and whose remote has since disappeared."""
    settings.CONVEYOR_WORKSPACES_DIR = tmp_path / "workspaces"
    project = make_project(repo=str(git_repo))
    checkout(project)
    shutil.move(git_repo, tmp_path / "moved-away")
    return project


def test_webhooks_off_a_fetch_failure_notifies_in_app_and_enqueues_no_delivery(
    failing_workspace, allow_private, start_worker, start_beat, settings, staff
):
    endpoint("http://127.0.0.1:9/hook")
    schedule("fetch_workspaces", 2)
    env = {"CONVEYOR_WEBHOOKS_ENABLED": "false", **workspaces_env(settings)}
    start_worker(queues=with_host_rounds(settings, "maintenance,webhooks,default"), env=env)
    start_beat()
    wait_until(
        lambda: Notification.objects.filter(topic="workspace.sync_failed").count() == len(staff),
        timeout=60,
        message="the in-app notice to each staff user",
    )
    here = f"fetch_workspaces@{settings.CONVEYOR_DEPLOYER_HOST}"  # this host's rounds
    first = runs_of(here).first()
    wait_until(
        lambda: runs_of(here).filter(started_at__gt=first.finished_at).count() >= 2,
        timeout=30,
        message="two more fetch rounds",
    )
    assert first.counts["failed"] == 1
    assert Job.objects.filter(task="webhooks.deliver").count() == 0
    assert Notification.objects.filter(topic="workspace.sync_failed").count() == len(staff)


def workspaces_env(settings) -> dict:
    return {"CONVEYOR_WORKSPACES_DIR": str(settings.CONVEYOR_WORKSPACES_DIR)}


def test_webhooks_on_an_unreachable_url_retries_then_one_dead_delivery_and_every_admin_told(
    failing_workspace, allow_private, start_worker, start_beat, settings, staff
):
    hook = endpoint(f"http://127.0.0.1:{free_port()}/hook")
    schedule("fetch_workspaces", 2)
    env = {**WEBHOOK_ENV, "CONVEYOR_WEBHOOK_MAX_ATTEMPTS": "3", **workspaces_env(settings)}
    worker = start_worker(
        queues=with_host_rounds(settings, "maintenance,webhooks,default"), env=env
    )
    start_beat()
    delivery = wait_until(
        lambda: Delivery.objects.filter(endpoint=hook, status=DeliveryStatus.DEAD).first(),
        timeout=90,
        message="the delivery to be dead",
    )
    assert Delivery.objects.filter(endpoint=hook).count() == 1
    job = Job.objects.get(task="webhooks.deliver")
    assert job.status == JobStatus.DEAD and job.attempts == 3
    assert len([e for e in worker.events("job.fail_retry") if e["job_id"] == job.pk]) == 2
    told = Notification.objects.filter(topic="webhook.dead_letter")
    assert sorted(told.values_list("recipient__username", flat=True)) == ["ops0", "ops1"]
    assert delivery.attempts.count() == 3


def test_prune_warns_a_reuse_clears_the_warning_and_then_the_worktree_is_removed(
    make_project, git_repo, settings, tmp_path, staff, start_worker, start_beat
):
    settings.CONVEYOR_WORKSPACES_DIR = tmp_path / "workspaces"
    project = make_project(repo=str(git_repo))
    tree = checkout(project)
    schedule("prune_worktrees", 2)
    start_worker(queues=with_host_rounds(settings, MAINTENANCE), env=workspaces_env(settings))
    start_beat()

    # Seed step: last used 28 days ago (threshold 30d, warning lead 72h) -> warned.
    Worktree.objects.filter(pk=tree.pk).update(last_used_at=timezone.now() - timedelta(days=28))
    warned = wait_until(
        lambda: Worktree.objects.filter(pk=tree.pk, prune_warning_at__isnull=False).first(),
        timeout=30,
        message="the prune warning",
    )
    assert Notification.objects.filter(topic="worktree.prune_pending").count() == len(staff)

    # Reuse clears it: acquire + release.
    checkout(project, warned.commit_sha)
    reused = Worktree.objects.get(pk=tree.pk)
    assert reused.prune_warning_at is None
    assert timezone.now() - reused.last_used_at < timedelta(seconds=30)

    # Unused 31 days, warned longer than the lead ago -> the next tick removes it.
    Worktree.objects.filter(pk=tree.pk).update(
        last_used_at=timezone.now() - timedelta(days=31),
        prune_warning_at=timezone.now() - timedelta(hours=73),
    )
    wait_until(
        lambda: not Worktree.objects.filter(pk=tree.pk).exists(),
        timeout=30,
        message="the worktree row to go",
    )
    assert not Path(tree.path).exists()
    assert Workspace.objects.count() == 1


def test_the_reaper_resets_a_job_whose_worker_was_killed(start_worker, start_beat):
    lease = {"CONVEYOR_JOB_LEASE_TIMEOUT": "5s"}
    doomed = start_worker(queues="default", concurrency=1, env=lease)
    job = services.enqueue("tests.record", {"sleep": 60, "first_only": True})
    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.RUNNING,
        timeout=60,
        message="the job to run",
    )
    doomed.kill()  # kill -9 of the worker and its pool: no signal, no hand-back
    schedule("reap_jobs", 2)
    start_worker(queues="default,maintenance", concurrency=2, env=lease)
    start_beat()
    done = wait_until(
        lambda: Job.objects.filter(pk=job.pk, status=JobStatus.SUCCEEDED).first(),
        timeout=60,
        message="the job to be reaped and run again",
    )
    assert done.attempts == 2
    assert any(any(v for v in run.counts.values()) for run in runs_of("reap_jobs"))
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


def test_purge_deletes_a_job_past_its_retention_and_keeps_one_before_it(start_worker, start_beat):
    now = timezone.now()

    def finished(days: int) -> Job:
        return Job.objects.create(
            task="tests.record",
            status=JobStatus.SUCCEEDED,
            run_after=now,
            created_at=now,
            updated_at=now,
            finished_at=now - timedelta(days=days),
        )

    old, recent = finished(8), finished(6)  # retention 7d
    schedule("purge_jobs", 2)
    start_worker(queues=MAINTENANCE)
    start_beat()
    wait_until(lambda: not Job.objects.filter(pk=old.pk).exists(), timeout=30, message="purge")
    # The run is recorded once the runner has returned, a moment after its DELETE.
    first = wait_until(lambda: runs_of("purge_jobs").first(), timeout=30, message="its record")
    assert first.counts["completed"] == 1
    wait_runs("purge_jobs", 2)
    assert Job.objects.filter(pk=recent.pk).exists()
