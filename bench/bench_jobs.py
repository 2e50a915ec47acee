"""Job engine benchmark: no-op jobs end to end against raw Celery no-op tasks.

Both run on the same worker processes and the same Redis broker, in the same run:
  * raw Celery: ``send_task`` of a task that only increments a Redis counter;
  * Conveyor: ``enqueue_many`` of ``jobs.noop`` (row written, id published, claimed by one
    UPDATE, run, completed by one UPDATE).
Also: SQL statements per job on the worker's hot path, and the ``enqueue_many`` rate.
"""

import os
import time

from bench import harness


def main() -> dict:
    env = harness.configure_environment()
    (harness.ROOT / "var" / "bench").mkdir(parents=True, exist_ok=True)
    harness.prepare_database()
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import bench.tasks
    from jobs import services
    from jobs.models import Job, JobStatus
    from jobs.tasks import noop
    from project.celery import app

    n = 1000 if harness.QUICK else 5000
    bulk = 10_000 if harness.QUICK else 50_000
    concurrency = int(os.environ.get("BENCH_CONCURRENCY", "2"))
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge("default")
    counter = bench.tasks.counter()
    counter.delete("bench:raw_noop")

    # SQL statements per job on the worker's hot path, measured in-process.
    job = services.enqueue("jobs.noop", {})
    with CaptureQueriesContext(connection) as queries:
        noop(job.pk)
    statements = [q["sql"].split()[0] for q in queries.captured_queries]
    Job.objects.all().delete()

    worker = harness.start_worker(env, concurrency=concurrency)
    try:
        started = time.perf_counter()
        with app.producer_or_acquire() as producer:
            for _ in range(n):
                app.send_task("bench.raw_noop", queue="default", producer=producer)
        while int(counter.get("bench:raw_noop") or 0) < n:
            time.sleep(0.02)
        raw_seconds = time.perf_counter() - started

        started = time.perf_counter()
        services.enqueue_many("jobs.noop", [{} for _ in range(n)])
        while Job.objects.filter(status=JobStatus.SUCCEEDED).count() < n:
            time.sleep(0.05)
        job_seconds = time.perf_counter() - started
    finally:
        worker.stop()
    Job.objects.all().delete()

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge("default")
    started = time.perf_counter()
    services.enqueue_many("jobs.noop", [{"i": i} for i in range(bulk)])
    enqueue_seconds = time.perf_counter() - started
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge("default")
    Job.objects.all().delete()

    results = {
        "jobs": n,
        "worker_concurrency": concurrency,
        "raw_celery_tasks_per_s": round(n / raw_seconds, 1),
        "conveyor_jobs_per_s": round(n / job_seconds, 1),
        "conveyor_vs_raw_celery": round(raw_seconds / job_seconds, 3),
        "sql_statements_per_job": len(statements),
        "sql_statement_kinds": " + ".join(statements),
        "enqueue_many_jobs": bulk,
        "enqueue_many_jobs_per_s": round(bulk / enqueue_seconds, 1),
    }
    harness.record("jobs", results)
    return results


if __name__ == "__main__":
    main()
