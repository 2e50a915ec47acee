"""runs_on decisions on both sides of each boundary, and jobs handed back from gone hosts."""

from datetime import timedelta

from django.utils import timezone

from deployments import deployers, routing
from deployments.models import Deployer
from deployments.routing import Route
from deployments.services import deployment_create
from jobs.models import Job


def _deployer(host: str, tags: list[str], *, seen_ago: timedelta = timedelta(0)) -> None:
    now = timezone.now()
    Deployer.objects.create(host=host, tags=tags, started_at=now, last_seen_at=now - seen_ago)


def test_decide_runs_here_moves_waits_or_fails(make_project, settings):
    settings.CONVEYOR_DEPLOYER_HOST, settings.CONVEYOR_DEPLOYER_TAGS = "alpha", "linux"
    settings.CONVEYOR_DEPLOYER_GONE_AFTER = timedelta(minutes=2)
    settings.CONVEYOR_RUNS_ON_WAIT = timedelta(minutes=10)
    plain = deployment_create(project=make_project("plain"), ref="main")
    assert routing.decide(plain).route is Route.HERE
    pinned = deployment_create(project=make_project("ml", runs_on=["gpu", "linux"]), ref="main")
    assert routing.decide(pinned).route is Route.WAIT  # nobody has gpu
    _deployer("stale", ["gpu", "linux"], seen_ago=timedelta(minutes=3))  # not live
    _deployer("half", ["gpu"])  # lacks linux
    assert routing.decide(pinned).route is Route.WAIT
    _deployer("beta", ["gpu", "linux", "x86"])
    assert routing.decide(pinned) == routing.Routing(
        Route.MOVED, host="beta", note=routing._on("beta")
    )
    settings.CONVEYOR_DEPLOYER_TAGS = "linux,gpu"
    assert routing.decide(pinned).route is Route.HERE

    settings.CONVEYOR_DEPLOYER_TAGS = "linux"
    Deployer.objects.filter(host="beta").delete()
    now = timezone.now()
    pinned.waiting_since = now - timedelta(minutes=10) + timedelta(seconds=5)
    assert routing.decide(pinned, now=now).route is Route.WAIT
    pinned.waiting_since = now - timedelta(minutes=10)
    decided = routing.decide(pinned, now=now)
    assert decided.route is Route.FAIL and "gpu, linux" in decided.note


def test_a_gone_hosts_waiting_deployment_jobs_go_back_to_the_shared_queue(make_project, settings):
    settings.CONVEYOR_DEPLOYER_GONE_AFTER = timedelta(minutes=2)
    _deployer("beta", ["gpu"], seen_ago=timedelta(minutes=3))
    _deployer("alpha", ["gpu"], seen_ago=timedelta(minutes=1))
    deployment = deployment_create(project=make_project(runs_on=["gpu"]), ref="main")
    Job.objects.filter(pk=deployment.job_id).update(queue=deployers.host_queue("beta"))
    kept = deployment_create(project=make_project("other", runs_on=["gpu"]), ref="main")
    Job.objects.filter(pk=kept.job_id).update(queue=deployers.host_queue("alpha"))

    assert deployers.mark_gone() == 1
    assert Job.objects.get(pk=deployment.job_id).queue == "deployments"
    assert Job.objects.get(pk=kept.job_id).queue == "deployments.host.alpha"  # alpha is live
    assert Deployer.objects.get(host="beta").gone_at is not None
    assert Deployer.objects.get(host="alpha").gone_at is None
