"""Deployer hosts' own queues (deployments.host.<host>) are queues like any other."""

import os
import subprocess

from django.utils import timezone

from deployments.models import Deployer
from tests.processes import PYTHON, ROOT


def test_live_hosts_queues_are_listed_and_a_host_queue_can_be_paused(make_api):
    now = timezone.now()
    Deployer.objects.create(host="alpha", started_at=now, last_seen_at=now)
    Deployer.objects.create(host="gone-1", started_at=now, last_seen_at=now, gone_at=now)
    api = make_api("admin")
    names = [queue["name"] for queue in api.get("/queues").json()]
    assert "deployments.host.alpha" in names and "deployments.host.gone-1" not in names
    paused = api.post("/queues/deployments.host.alpha/pause")
    assert paused.status_code == 200, paused.content
    assert paused.json()["paused"] is True
    assert api.post("/queues/deployments.host./pause").status_code == 404  # no host named


def test_a_host_queue_may_be_limited_at_start_up():
    env = {**os.environ, "CONVEYOR_QUEUE_CONCURRENCY": "deployments.host.alpha=1"}
    result = subprocess.run(
        [PYTHON, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
