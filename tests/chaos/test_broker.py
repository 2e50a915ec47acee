"""Scenarios 2 and 4 (Redis only): the broker restarted, flushed, or down while the API
accepts deployments. A private redis-server per test, so the shared one is never touched."""

import socket
import time

import pytest

from deployments.models import Deployment
from jobs.maintenance.sweeper import sweep
from jobs.models import Job
from project.access.tokens import token_create
from tests.chaos.load import Load, drain, make_project, start_load, verify
from tests.chaos.servers import broker
from tests.processes import wait_until

pytestmark = pytest.mark.chaos


def flushall(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"FLUSHALL\r\n")
        assert sock.recv(16).startswith(b"+OK")


def done_count(ids: list[int]) -> int:
    return Job.objects.filter(pk__in=ids, status="succeeded").count()


def test_redis_restarted_and_flushed_mid_run(chaos, private_redis, receiver, tmp_path, summary):
    worker = chaos(concurrency=2, env={"CELERY_BROKER_URL": private_redis.url})
    with broker(private_redis.url):
        load = start_load(jobs=3000, deployments=3, receiver=receiver, tmp_path=tmp_path)
        wait_until(lambda: done_count(load.job_ids) > 300, timeout=60, message="a start")
        private_redis.stop()  # every queued message is gone with it
        time.sleep(1)
        private_redis.start()  # same port, empty
        restarted_at = done_count(load.job_ids)
        # The same worker consumes again (it re-subscribed) once the sweeper re-sends.
        wait_until(
            lambda: sweep() and done_count(load.job_ids) > restarted_at + 200,
            timeout=60,
            interval=1,
            message="the worker to consume after the restart",
        )
        flushall(private_redis.port)
        flushed_at = done_count(load.job_ids)
        drained = drain(load, timeout=120)
        verdict = verify(load, receiver)
    # The one worker kept consuming after the restart (it re-subscribed), without a restart.
    assert worker.process.poll() is None
    assert restarted_at < len(load.job_ids), "the run ended before the restart"
    assert flushed_at < len(load.job_ids), "the run ended before the FLUSHALL"
    after = Job.objects.filter(pk__in=load.job_ids, started_at__isnull=False)
    assert {h["worker"].split("@")[0] for j in after[:50] for h in j.attempts_history} == {
        worker.name
    }
    swept = sum(1 for j in Job.objects.filter(pk__in=load.job_ids) if j.attempts > 1)
    summary.jobs = len(load.job_ids) + len(load.deployment_ids) + verdict.deliveries
    summary.faults = 2
    summary.drain = drained
    summary.note = (
        f"restart at {restarted_at} done, FLUSHALL at {flushed_at} done; "
        f"{swept} jobs needed a second attempt; the same worker consumed throughout"
    )


def test_the_api_accepts_deployments_while_the_broker_is_down(
    chaos, private_redis, receiver, tmp_path, client, summary
):
    from webhooks import services as webhook_services

    private_redis.stop()
    project = make_project(tmp_path / "step-pids")
    token, raw = token_create(name="chaos", scope="deploy")
    project.api_tokens.add(token)
    endpoint = webhook_services.endpoint_create(
        url=receiver.url("/chaos"), topics=["deployment.succeeded"], actor="chaos"
    )
    headers = {"Authorization": f"Bearer {raw}"}
    ids, slowest = [], 0.0
    with broker(private_redis.url):
        for n in range(5):
            started = time.monotonic()
            response = client.post(
                "/api/v1/projects/chaos/deployments",
                {"ref": "main", "environment": f"env{n}"},
                content_type="application/json",
                headers=headers,
            )
            slowest = max(slowest, time.monotonic() - started)
            assert response.status_code == 201, response.content
            ids.append(response.json()["id"])
        assert set(Deployment.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
            "pending"
        }
        private_redis.start()
        chaos(concurrency=2, env={"CELERY_BROKER_URL": private_redis.url})
        load = Load(job_ids=[], deployment_ids=ids, pids=tmp_path / "step-pids")
        load.endpoint_id = endpoint.pk
        drained = drain(load, timeout=90)
        verdict = verify(load, receiver)
    assert verdict.deployments == {"success": 5}
    summary.jobs = len(ids) + verdict.deliveries
    summary.faults = 1
    summary.drain = drained
    summary.note = f"5 triggers answered 201 with the broker down (slowest {slowest:.1f}s)"
