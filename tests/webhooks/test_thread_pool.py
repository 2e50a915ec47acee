"""The ``webhooks`` queue on a thread-pool worker (as make run and docker-compose run it):
the claim, lease, outcome and dead-letter rules hold with threads instead of pool children."""

import os
import signal
import threading
import time

import pytest

from jobs.maintenance.reaper import reap
from jobs.models import Job, JobReason, JobStatus
from tests.processes import wait_until
from tests.webhooks.conftest import WORKER_ENV
from tests.webhooks.receiver import Reply
from tests.webhooks.test_delivery import make_endpoint, wait_delivery
from webhooks import notify
from webhooks.models import AttemptOutcome, Delivery, DeliveryStatus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("allow_private")]
D = DeliveryStatus
THREADS = ("--pool", "threads")


@pytest.fixture
def thread_worker(start_worker):
    def start(concurrency: int = 8, **env):
        return start_worker(
            queues="webhooks",
            concurrency=concurrency,
            env={**WORKER_ENV, **{key: str(value) for key, value in env.items()}},
            extra_args=THREADS,
        )

    return start


def test_deliveries_run_concurrently_on_threads(receiver, thread_worker):
    make_endpoint(receiver)
    receiver.default = Reply(200, delay=0.5)
    in_flight, peak, lock = [0], [0], threading.Lock()
    record = receiver.record

    def counting(request):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        reply = record(request)
        threading.Timer(reply.delay, lambda: _done(in_flight, lock)).start()
        return reply

    receiver.record = counting
    thread_worker(concurrency=8, CONVEYOR_WEBHOOK_TIMEOUT="5s")
    events = [notify("deployment.succeeded", {"n": i}) for i in range(16)]
    ids = list(Delivery.objects.filter(event__in=events).values_list("pk", flat=True))
    for delivery_id in ids:
        wait_delivery(delivery_id, D.DELIVERED)
    assert peak[0] >= 6  # one pool of threads had many receivers waiting at once
    assert {r.header("webhook-id") for r in receiver.received()} == {e.message_id for e in events}


def _done(in_flight, lock) -> None:
    with lock:
        in_flight[0] -= 1


def test_a_hanging_receiver_times_out_and_is_retried_on_threads(receiver, thread_worker):
    make_endpoint(receiver)
    receiver.script("/hook", Reply(200, delay=5))
    thread_worker(concurrency=4)  # timeout 1 s
    event = notify("deployment.succeeded", {"deployment": 6})
    (delivery,) = Delivery.objects.filter(event=event)
    delivery = wait_delivery(delivery.pk, D.DELIVERED, D.DEAD)
    assert delivery.status == D.DELIVERED and delivery.job.attempts == 2
    first, second = delivery.attempts.all()
    assert first.outcome == AttemptOutcome.RETRY and "timed out" in first.error
    assert second.outcome == AttemptOutcome.DELIVERED
    # The delivery row is written by the body; the job's success a moment after it returns.
    job = wait_until(
        lambda: Job.objects.filter(pk=delivery.job_id, status=JobStatus.SUCCEEDED).first(),
        timeout=60,
        message="the delivery job's success",
    )
    retried, delivered = job.attempts_history
    assert (retried["reason"], delivered["outcome"]) == ("error", "succeeded")
    assert retried["error"]["class_path"] == "webhooks.tasks.DeliveryFailed"


def test_a_killed_thread_worker_loses_no_delivery(receiver, thread_worker):
    """kill -9 of the whole process (no pool child to lose, no signal): the lease expires,
    the reaper re-queues the job, and a new worker delivers it with the same webhook-id."""
    make_endpoint(receiver)
    receiver.script("/hook", Reply(200, delay=60))
    lease = {"CONVEYOR_JOB_LEASE_TIMEOUT": "6s"}
    worker = thread_worker(concurrency=4, CONVEYOR_WEBHOOK_TIMEOUT="30s", **lease)
    event = notify("deployment.succeeded", {"deployment": 8})
    (first,) = receiver.wait_for(1)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.process.wait(timeout=10)
    (delivery,) = Delivery.objects.filter(event=event)
    assert delivery.status == D.PENDING and delivery.job.status == JobStatus.RUNNING

    with override_lease():
        time.sleep(7)  # the lease (6 s) runs out: nobody renews it any more
        assert reap().retried == 1
    delivery.job.refresh_from_db()
    assert delivery.job.reason == JobReason.LEASE_EXPIRED
    thread_worker(concurrency=4, **lease)
    delivery = wait_delivery(delivery.pk, D.DELIVERED, timeout=60)
    second = receiver.received("/hook")[-1]
    assert second.header("webhook-id") == first.header("webhook-id") == event.message_id
    job = delivery.job
    # The delivery is recorded by the body; the job's own success a moment later.
    wait_until(
        lambda: job.refresh_from_db() or job.status == JobStatus.SUCCEEDED,
        timeout=30,
        message="the delivery job's success to be recorded",
    )
    assert [e["reason"] for e in job.attempts_history] == ["lease_expired", ""]


def override_lease():
    from datetime import timedelta

    from django.test import override_settings

    return override_settings(CONVEYOR_JOB_LEASE_TIMEOUT=timedelta(seconds=6))


def test_thread_worker_renews_leases_for_every_running_delivery(receiver, thread_worker):
    make_endpoint(receiver)
    receiver.default = Reply(200, delay=8)
    thread_worker(concurrency=4, CONVEYOR_WEBHOOK_TIMEOUT="20s", CONVEYOR_JOB_LEASE_TIMEOUT="6s")
    events = [notify("deployment.succeeded", {"n": i}) for i in range(3)]
    ids = list(Delivery.objects.filter(event__in=events).values_list("pk", flat=True))
    receiver.wait_for(3)
    with override_lease():
        time.sleep(7)  # past one lease: only the process-wide lease keeper keeps them alive
        assert reap().retried == 0
    for delivery_id in ids:
        delivery = wait_delivery(delivery_id, D.DELIVERED, timeout=60)
        assert delivery.job.attempts == 1
    wait_until(lambda: len(receiver.received()) == 3, timeout=5, message="no second sends")
