"""Scenario 5: beat killed (kill -9) and restarted: maintenance stops while it is down and
resumes after, from the schedule in the database. (Two beats at once is tested elsewhere.)"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from unittest import mock

import pytest

from jobs import services
from jobs.models import Job
from project.celery import app
from tests.chaos.load import WORKER_ENV
from tests.processes import PYTHON, ROOT, wait_until

pytestmark = pytest.mark.chaos
MAINTENANCE_ENV = {
    "CONVEYOR_SWEEPER_INTERVAL": "1s",
    "CONVEYOR_REAPER_INTERVAL": "1s",
    "CONVEYOR_SWEEPER_GRACE": "1s",
}


class Beat:
    def __init__(self, env: dict, log) -> None:
        self.process = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "project", "beat", "--loglevel", "INFO"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def enqueue_lost(count: int) -> list[int]:
    """Jobs whose messages the broker dropped: the rows exist, nothing was published."""
    with mock.patch.object(app, "send_task"):
        return [job.pk for job in services.enqueue_many("tests.record", [{}] * count)]


def succeeded(ids: list[int]) -> int:
    return Job.objects.filter(pk__in=ids, status="succeeded").count()


def test_beat_killed_and_restarted(chaos, worker_env, tmp_path, summary):
    env = {**worker_env, **WORKER_ENV, **MAINTENANCE_ENV}
    subprocess.run(
        [sys.executable, "manage.py", "setup_periodic_tasks"],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    chaos(concurrency=2, env=MAINTENANCE_ENV)
    with (tmp_path / "beat.log").open("wb") as log:
        beat = Beat(env, log)
        try:
            first = enqueue_lost(100)
            wait_until(lambda: succeeded(first) == 100, timeout=60, message="beat's sweeps")
            beat.kill()
            down = enqueue_lost(100)
            time.sleep(4)  # several sweeper intervals with no beat: nobody re-sends them
            assert succeeded(down) == 0
            started = time.monotonic()
            beat = Beat(env, log)
            wait_until(lambda: succeeded(down) == 100, timeout=60, message="sweeps to resume")
            drained = time.monotonic() - started
        finally:
            beat.kill()
    assert Job.objects.exclude(status="succeeded").count() == 0
    summary.jobs = 200
    summary.faults = 1
    summary.drain = drained
    summary.note = "100 jobs with lost messages stayed queued while beat was down, ran after"
