"""Shared set-up for the benchmarks: a private database, a Redis db, real worker processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.processes import Worker

ROOT = Path(__file__).resolve().parent.parent
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/conveyor_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
RESULTS = ROOT / "bench" / "results"


def configure_environment() -> dict:
    """Point this process (and its children) at the benchmark database and broker."""
    env = {
        "DATABASE_URL": DATABASE_URL,
        "CELERY_BROKER_URL": REDIS_URL,
        "BENCH_COUNTER_URL": REDIS_URL,
        "CONVEYOR_VAR_DIR": str(ROOT / "var" / "bench"),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "CONVEYOR_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(env)
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


def start_worker(env: dict, *, concurrency: int, queues: str = "default") -> Worker:
    """Start a real ``celery worker`` that also knows the benchmark's own tasks."""
    return Worker(
        {**env, "CONVEYOR_LOG_LEVEL": "INFO"},
        queues=queues,
        concurrency=concurrency,
        name="bench",
        include="tests.jobtasks,bench.tasks",
    )


def record(name: str, results: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2))
    width = max(len(k) for k in results)
    print(f"\n== {name} ({'quick' if QUICK else 'full'}) ==")
    for key, value in results.items():
        print(f"  {key:<{width}}  {value}")
