"""Chaos fixtures: private servers, the chaos worker settings, and one summary line per run.

Each scenario records ``Summary`` lines; they are printed at the end of the pytest run and
appended to ``$CONVEYOR_VAR_DIR/chaos-summary.txt`` (pytest shows test output only with -s).
"""

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings

from tests.chaos.load import WORKER_ENV
from tests.processes import ROOT, RedisServer
from tests.webhooks.receiver import Receiver

SUMMARIES: list[str] = []


def broker_kind() -> str:
    return "amqp" if settings.CELERY_BROKER_URL.startswith(("amqp", "pyamqp")) else "redis"


@dataclass
class Summary:
    scenario: str
    jobs: int = 0
    faults: int = 0
    lost: int = 0
    duplicated: int = 0
    drain: float = 0.0
    note: str = ""

    def line(self) -> str:
        return (
            f"{self.scenario} [{broker_kind()}]: jobs={self.jobs} faults={self.faults} "
            f"lost={self.lost} duplicated={self.duplicated} drain={self.drain:.1f}s"
            + (f" ({self.note})" if self.note else "")
        )


@pytest.fixture
def summary(request):
    """A Summary for this scenario, written out when the test passes its checks."""
    record = Summary(scenario=request.node.name.removeprefix("test_"))
    started = time.monotonic()
    yield record
    if not getattr(request.node, "chaos_passed", False):
        return
    line = f"{record.line()} total={time.monotonic() - started:.0f}s"
    SUMMARIES.append(line)
    path = Path(os.environ.get("CONVEYOR_VAR_DIR") or ROOT / "var" / "test") / "chaos-summary.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.chaos_passed = report.passed
    return report


def pytest_terminal_summary(terminalreporter) -> None:
    if SUMMARIES:
        terminalreporter.section("chaos summary")
        for line in SUMMARIES:
            terminalreporter.write_line(line)


@pytest.fixture
def chaos(settings, start_worker):
    """The test process as beat would run maintenance (short sweeper grace), loopback
    webhooks allowed; returns a starter for workers with the chaos settings."""
    settings.CONVEYOR_SWEEPER_GRACE = timedelta(seconds=1)
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True

    def start(*, concurrency: int = 2, env: dict | None = None, **kwargs):
        return start_worker(concurrency=concurrency, env={**WORKER_ENV, **(env or {})}, **kwargs)

    return start


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def private_redis():
    """A private redis-server the scenario may restart or flush."""
    server = RedisServer().start()
    yield server
    server.stop()


def pool_children(worker) -> list[int]:
    """The worker's pool processes (its direct children), not their step subprocesses."""
    path = Path(f"/proc/{worker.pid}/task/{worker.pid}/children")
    try:
        return [int(pid) for pid in path.read_text().split()]
    except OSError:
        return []
