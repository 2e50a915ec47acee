"""runs_on while no deployer runs at all: beat's check_unrouted says what the deployment waits
for, then fails it no_deployer and cancels its job; a live deployer with the tags is left to
decide at its claim."""

from datetime import timedelta

import pytest
from django.utils import timezone

from deployments.maintenance.unrouted import check_unrouted
from deployments.models import Deployer, Deployment, DeploymentEvent
from deployments.services import deployment_create
from jobs.models import Job, JobStatus
from tests.processes import wait_until

pytestmark = pytest.mark.usefixtures("purge_broker")


def _backdate(deployment: Deployment, **fields) -> None:
    Deployment.objects.filter(pk=deployment.pk).update(**fields)


def test_a_runs_on_nobody_can_take_says_so_then_fails_no_deployer(make_project, settings):
    settings.CONVEYOR_RUNS_ON_WAIT = timedelta(minutes=10)
    gpu = make_project("ml", runs_on=["gpu"])
    plain = make_project("web")
    waiting = deployment_create(project=gpu, ref="main")
    untagged = deployment_create(project=plain, ref="main")
    fresh = deployment_create(project=gpu, ref="main", environment="staging")
    long_ago = timezone.now() - timedelta(minutes=1)
    for deployment in (waiting, untagged):
        _backdate(deployment, created_at=long_ago)

    first = check_unrouted()
    assert (first.waiting, first.failed) == (1, 0)
    waiting.refresh_from_db()
    assert waiting.status == "pending" and "gpu" in waiting.waiting_for
    assert waiting.waiting_since is not None
    notes = DeploymentEvent.objects.filter(
        deployment=waiting, kind=DeploymentEvent.WAITING_FOR_DEPLOYER
    )
    assert notes.count() == 1  # said once, not on every run
    for other in (untagged, fresh):  # no runs_on; or younger than one deployment wait
        other.refresh_from_db()
        assert other.waiting_for == "" and other.status == "pending"

    _backdate(waiting, waiting_since=timezone.now() - timedelta(minutes=11))
    assert check_unrouted().failed == 1
    waiting.refresh_from_db()
    assert (waiting.status, waiting.failure_reason) == ("failed", "no_deployer")
    assert "gpu" in waiting.error and waiting.waiting_for == ""
    job = wait_until(
        lambda: Job.objects.filter(pk=waiting.job_id, status=JobStatus.CANCELLED).first(),
        timeout=10,
        message="the failed deployment's job to be cancelled",
    )
    assert job.status == JobStatus.CANCELLED
    assert check_unrouted().failed == 0  # decided once


def test_a_live_deployer_with_the_tags_is_left_to_decide(make_project):
    gpu = make_project("ml", runs_on=["gpu"])
    deployment = deployment_create(project=gpu, ref="main")
    _backdate(deployment, created_at=timezone.now() - timedelta(minutes=1))
    now = timezone.now()
    Deployer.objects.create(host="box", tags=["gpu", "linux"], started_at=now, last_seen_at=now)
    result = check_unrouted()
    assert (result.waiting, result.failed) == (0, 0)
    deployment.refresh_from_db()
    assert deployment.status == "pending" and deployment.waiting_for == ""
    # A host gone (not seen for the gone-after time) no longer counts.
    Deployer.objects.update(last_seen_at=now - timedelta(hours=1))
    assert check_unrouted().waiting == 1
