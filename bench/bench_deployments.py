"""Benchmark the deployment runner: log ingestion and trigger-to-first-step latency.

Measures, in one run against real PostgreSQL + Redis and a real Celery worker:

1. Baseline: a plain ``subprocess`` whose 100 MiB of output a Python loop copies into a file
   (64 KiB reads): MB/s and the copying process's peak RSS.
2. Conveyor: a deployment whose one step prints the same 100 MiB: MB/s from the step's start
   to its end (output masked and stored as LogChunk rows), and the peak RSS of the worker's
   pool child that ran it (VmHWM, reset just before), next to its RSS before.
3. Trigger to first step start: ``deployment_create`` (committed) until the first step's
   ``started_at``, over sequential deployments on an idle worker (median, p90, max).

Usage (services as for the tests; a scratch database ``conveyor_bench`` is created)::

    .venv/bin/python bench/bench_deployments.py
    BENCH_QUICK=1 .venv/bin/python bench/bench_deployments.py     # 20 MiB, 5 triggers

Environment: ``BENCH_DATABASE_URL`` (postgres://postgres@127.0.0.1:5432/conveyor_bench),
``BENCH_REDIS_URL`` (redis://127.0.0.1:6379/4). Results also go to
``bench/results/deployments.json``.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
MIB = 1024 * 1024
SIZE = (20 if QUICK else 100) * MIB
TRIGGERS = 5 if QUICK else 20
LINE = "0" * 99  # `yes` adds the newline: 100-byte lines
FLOOD = f"yes {LINE} | head -c {SIZE}"
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/conveyor_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/4")
VAR_DIR = tempfile.mkdtemp(prefix="conveyor-bench-")

BASELINE = f"""
import json, subprocess, sys, time
began = time.perf_counter()
proc = subprocess.Popen(["/bin/sh", "-c", {FLOOD!r}], stdout=subprocess.PIPE)
with open(sys.argv[1], "wb") as out:
    while chunk := proc.stdout.read(65536):
        out.write(chunk)
proc.wait()
seconds = time.perf_counter() - began
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the process that exec'd us.
status = open("/proc/self/status").read().split("VmHWM:")[1]
peak = int(status.split()[0])
print(json.dumps({{"seconds": seconds, "peak_rss_kib": peak}}))
"""


def ensure_database() -> None:
    import psycopg

    parsed = urlparse(DATABASE_URL)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def setup_django() -> dict:
    env = {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "CELERY_BROKER_URL": REDIS_URL,
        "CONVEYOR_VAR_DIR": VAR_DIR,
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(
        {k: env[k] for k in ("DATABASE_URL", "CELERY_BROKER_URL", "CONVEYOR_VAR_DIR")}
    )
    os.environ["CONVEYOR_LOG_LEVEL"] = "WARNING"  # this process only; the worker logs INFO
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return env


def baseline() -> dict:
    with tempfile.NamedTemporaryFile() as out:
        result = subprocess.run(
            [sys.executable, "-c", BASELINE, out.name], check=True, capture_output=True, text=True
        )
        stored = os.path.getsize(out.name)
    measured = json.loads(result.stdout)
    assert stored == SIZE, f"baseline stored {stored} bytes"
    return {
        "mb_per_s": round(SIZE / MIB / measured["seconds"], 1),
        "seconds": round(measured["seconds"], 2),
        "peak_rss_mib": round(measured["peak_rss_kib"] / 1024, 1),
    }


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing for {pid}")


def wait_finished(deployment_id: int, timeout: float = 600):
    from deployments.models import Deployment

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deployment = Deployment.objects.get(pk=deployment_id)
        if deployment.is_finished:
            return deployment
        time.sleep(0.05)
    raise RuntimeError(f"deployment {deployment_id} did not finish in {timeout}s")


def conveyor_ingestion(project) -> dict:
    from deployments.models import LogChunk, StepRun
    from deployments.services import deployment_create

    warm = wait_finished(deployment_create(project=project, ref="main", pipeline="noop").pk)
    pool_child = int(warm.worker.rsplit("/", 1)[1])
    Path(f"/proc/{pool_child}/clear_refs").write_text("5")  # reset VmHWM
    rss_before = status_kib(pool_child, "VmRSS")
    done = wait_finished(deployment_create(project=project, ref="main", pipeline="flood").pk)
    peak = status_kib(pool_child, "VmHWM")
    assert done.status == "success", done.error
    run = StepRun.objects.get(deployment=done)
    seconds = (run.finished_at - run.started_at).total_seconds()
    stored = sum(LogChunk.objects.filter(step_run=run).values_list("size", flat=True))
    assert stored >= SIZE, f"stored {stored} bytes of {SIZE}"
    return {
        "mb_per_s": round(SIZE / MIB / seconds, 1),
        "seconds": round(seconds, 2),
        "stored_bytes": stored,
        "chunks": LogChunk.objects.filter(step_run=run).count(),
        "worker_rss_before_mib": round(rss_before / 1024, 1),
        "worker_peak_rss_mib": round(peak / 1024, 1),
    }


def trigger_latency(project) -> dict:
    from deployments.models import StepRun
    from deployments.services import deployment_create

    samples = []
    for _ in range(TRIGGERS):
        deployment = deployment_create(project=project, ref="main", pipeline="noop")
        wait_finished(deployment.pk)
        first = StepRun.objects.get(deployment=deployment, position=1)
        samples.append((first.started_at - deployment.created_at).total_seconds() * 1000)
    samples.sort()
    return {
        "n": len(samples),
        "median_ms": round(statistics.median(samples), 1),
        "p90_ms": round(samples[int(0.9 * (len(samples) - 1))], 1),
        "max_ms": round(samples[-1], 1),
    }


def main() -> None:
    ensure_database()
    env = setup_django()
    from deployments.models import Deployment, Project
    from deployments.projects_as_code import apply_document
    from project.celery import QUEUES, app
    from tests.processes import Worker

    Deployment.objects.filter(project__slug="bench").delete()  # logs of earlier runs go too
    apply_document(
        {
            "projects": [
                {
                    "slug": "bench",
                    "secrets": {"BENCH_TOKEN": "not-in-the-output-1234"},
                    "pipelines": [
                        {"name": "flood", "steps": [{"name": "flood", "command": FLOOD}]},
                        {"name": "noop", "steps": [{"name": "noop", "command": "true"}]},
                    ],
                }
            ]
        }
    )
    project = Project.objects.get(slug="bench")
    with app.connection_for_write() as conn:
        for queue in QUEUES:
            conn.default_channel.queue_purge(queue)
    worker = Worker(env, queues="deployments", concurrency=1, name="bench")
    try:
        results = {
            "size_mib": SIZE // MIB,
            "baseline_subprocess_to_file": baseline(),
            "conveyor_step_to_log_chunks": conveyor_ingestion(project),
            "trigger_to_first_step": trigger_latency(project),
        }
    finally:
        worker.stop()
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "deployments.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
