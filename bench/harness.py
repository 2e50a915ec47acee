"""Shared set-up for the benchmarks: a private database, a Redis db, real worker processes.

Also the helpers every comparison uses: the number of interleaved rounds (5, or 2 with
``BENCH_QUICK=1``), a median-and-range summary, and percentiles.
"""

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tests.processes import Worker

ROOT = Path(__file__).resolve().parent.parent
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or (2 if QUICK else 5))
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/conveyor_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
RESULTS = ROOT / "bench" / "results"


def configure_environment(**extra: str) -> dict:
    """Point this process (and its children) at the benchmark database and broker."""
    env = {
        "DATABASE_URL": DATABASE_URL,
        "CELERY_BROKER_URL": REDIS_URL,
        "BENCH_COUNTER_URL": REDIS_URL,
        "CONVEYOR_VAR_DIR": str(ROOT / "var" / "bench"),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "CONVEYOR_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }
    os.environ.update(env)
    for private in (ROOT / "var", ROOT / "var" / "bench"):  # as start-up makes them
        private.mkdir(mode=0o700, exist_ok=True)
    return dict(os.environ)


def prepare_database() -> None:
    import psycopg

    from scripts.test_services import ensure_database

    ensure_database(DATABASE_URL)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True
    )
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs_job, jobs_auditlog, django_celery_results_taskresult CASCADE")


def setup_django() -> None:
    """``django.setup()`` for the benchmark process, which itself logs warnings only."""
    import logging

    import django

    django.setup()
    logging.getLogger().setLevel(logging.WARNING)


def start_worker(
    env: dict, *, concurrency: int, queues: str = "default", pool: str | None = None
) -> Worker:
    """Start a real ``celery worker`` that also knows the benchmark's own tasks."""
    return Worker(
        {**env, "CONVEYOR_LOG_LEVEL": "INFO"},
        queues=queues,
        concurrency=concurrency,
        name="bench",
        include="tests.jobtasks,bench.tasks",
        extra_args=("--pool", pool) if pool else (),
    )


def cpu_seconds(worker: Worker) -> float:
    """CPU time (user + system) used so far by the worker and its pool children."""
    from tests.processes import process_tree

    total = 0
    for pid in [worker.pid, *process_tree(worker.pid)]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def purge(*queues: str) -> None:
    from project.celery import QUEUES, app

    with app.connection_for_write() as conn:
        for queue in queues or QUEUES:
            conn.default_channel.queue_purge(queue)


def order(variants: list, round_no: int) -> list:
    """Rotate the variants each round so none always runs first (or right after another)."""
    shift = round_no % len(variants)
    return variants[shift:] + variants[:shift]


def summary(values: list[float], digits: int = 1) -> dict:
    """Median and range of one variant's rounds."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "rounds": [round(v, digits) for v in values],
    }


def ratio_summary(numerators: list[float], denominators: list[float]) -> dict:
    """Per-round ratios (each round's pair measured side by side): median and range."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    return summary(ratios, 3)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def record(name: str, results: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    results = {"mode": "quick" if QUICK else "full", "rounds": ROUNDS, **results}
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n== {name} ({'quick' if QUICK else 'full'}) ==")
    width = max(len(k) for k in results)
    for key, value in results.items():
        if isinstance(value, dict) and "median" in value:
            value = f"{value['median']}  ({value['min']}–{value['max']})"
        print(f"  {key:<{width}}  {value}")
