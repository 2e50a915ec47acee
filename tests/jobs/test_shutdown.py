"""CONVEYOR_SHUTDOWN_GRACE drives Celery's soft shutdown: SIGTERM waits that long, no longer."""

import signal
import time

from jobs import services
from jobs.models import Job, JobStatus
from tests.processes import wait_until


def test_the_grace_is_celerys_soft_shutdown_timeout():
    from django.conf import settings

    from project.celery import app

    assert settings.CONVEYOR_SHUTDOWN_GRACE.total_seconds() == 30  # the documented default
    assert app.conf.worker_soft_shutdown_timeout == 30


def test_sigterm_lets_a_running_job_run_for_the_grace_then_the_worker_exits(start_worker):
    worker = start_worker(
        queues="default",
        concurrency=1,
        env={"CONVEYOR_SHUTDOWN_GRACE": "3s", "REMAP_SIGTERM": "SIGQUIT"},
    )
    job = services.enqueue("jobs.noop", {"sleep": 60})
    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.RUNNING,
        timeout=60,
        message="the job to run",
    )
    stopping = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    worker.process.wait(timeout=30)
    elapsed = time.monotonic() - stopping
    assert 3 <= elapsed < 3 + 8, elapsed  # the grace, then a prompt exit, not the 60s job
    assert "Initiating Soft Shutdown, terminating in 3.0 seconds" in worker.text()


def test_sigterm_stops_an_idle_worker_at_once(start_worker):
    worker = start_worker(queues="default", concurrency=1, env={"REMAP_SIGTERM": "SIGQUIT"})
    stopping = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(timeout=30) == 0
    assert time.monotonic() - stopping < 5
    assert "Soft Shutdown" not in worker.text()  # nothing running: no grace to wait out
