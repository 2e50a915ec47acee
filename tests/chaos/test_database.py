"""Scenario 3: a private PostgreSQL cluster restarted mid-run (an immediate stop, as a crash):
the worker reconnects without being restarted, nothing is lost, nothing runs twice."""

import subprocess
import sys
import time

import psycopg
import pytest

from tests.chaos.load import WORKER_ENV
from tests.chaos.servers import PostgresCluster, pg_binary
from tests.jobtasks import SIDE_EFFECTS_TABLE
from tests.processes import ROOT, Worker, wait_until

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(pg_binary("initdb") is None, reason="initdb is not installed"),
]
JOBS = 1500

ENQUEUE = f"""
import tests.jobtasks
from tests.jobtasks import create_side_effects_table
from jobs.services import enqueue_many
create_side_effects_table()
jobs = enqueue_many("tests.side_effect", [{{"sleep": 0.003}}] * {JOBS})
print(jobs[0].pk, jobs[-1].pk)
"""

MAINTAIN = """
import time, tests.jobtasks
from django.db import connection
from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep
deadline = time.monotonic() + 100
while time.monotonic() < deadline:
    try:
        reap(); sweep()
    except Exception:
        connection.close()  # the database is restarting: try again in a second
    time.sleep(1)
"""


def manage(env: dict, *args: str, timeout: float = 120) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


@pytest.fixture
def cluster():
    server = PostgresCluster().init()
    yield server
    server.destroy()


def counts(url: str, first: int, last: int) -> dict:
    with psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=3) as conn:
        status = dict(
            conn.execute(
                "SELECT status, count(*) FROM jobs_job WHERE id BETWEEN %s AND %s GROUP BY 1",
                [first, last],
            ).fetchall()
        )
        effects = conn.execute(
            f"SELECT count(*), count(*) FILTER (WHERE runs > 1) FROM {SIDE_EFFECTS_TABLE}"
        ).fetchone()
    return {"status": status, "effects": effects[0], "twice": effects[1]}


def safe_counts(url: str, first: int, last: int) -> dict | None:
    try:
        return counts(url, first, last)
    except psycopg.OperationalError:
        return None


def test_postgres_restarted_mid_run(worker_env, purge_broker, cluster, summary):
    env = {**worker_env, **WORKER_ENV, "DATABASE_URL": cluster.url, "CONVEYOR_SWEEPER_GRACE": "1s"}
    manage(env, "migrate", "--noinput", timeout=300)
    first, last = map(int, manage(env, "shell", "-c", ENQUEUE).split()[-2:])
    worker = Worker(env, queues="default", concurrency=2)
    maintainer = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", MAINTAIN],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def succeeded() -> int:
            found = safe_counts(cluster.url, first, last)
            return found["status"].get("succeeded", 0) if found else 0

        wait_until(lambda: succeeded() > 200, timeout=60, message="a start")
        restarts = 0
        for _ in range(2):
            before = succeeded()
            cluster.restart()
            restarts += 1
            wait_until(
                lambda before=before: succeeded() > before + 100, timeout=60, message="progress"
            )
        faults_done = time.monotonic()
        wait_until(lambda: succeeded() == JOBS, timeout=90, interval=1, message="the drain")
        drained = time.monotonic() - faults_done
        final = counts(cluster.url, first, last)
        assert final["status"] == {"succeeded": JOBS}
        assert (final["effects"], final["twice"]) == (JOBS, 0)
        assert worker.process.poll() is None, "the worker had to be restarted"
    finally:
        maintainer.kill()
        maintainer.wait(timeout=10)
        worker.stop()
    summary.jobs = JOBS
    summary.faults = restarts
    summary.drain = drained
    summary.note = "immediate-mode restarts; the same worker reconnected each time"
