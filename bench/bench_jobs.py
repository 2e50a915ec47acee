"""Job engine throughput: no-op jobs end to end against raw Celery, side by side.

One worker (``celery worker``, prefork × ``BENCH_CONCURRENCY`` = 2, acks late, prefetch 1,
no result backend writes on either side), one Redis broker and one PostgreSQL database serve
every variant, in interleaved rounds (5, or 2 with ``BENCH_QUICK=1``; the order rotates each
round). Each round of each variant runs ``BENCH_JOBS`` (3,000) jobs or tasks:

* ``raw_noop``: raw Celery, ``send_task`` of a task that increments a Redis counter;
* ``raw_floor``: raw Celery, one message per row of a bench table, the task doing a
  claim-like and a complete-like single-row UPDATE, each its own commit (rows inserted by
  one INSERT inside the clock): the floor of "claim + complete" with one message per job;
* ``single``: ``enqueue_many("jobs.noop")`` with ``CONVEYOR_BATCH_SIZE=1`` (one message
  per job: the lean single path);
* ``batch_10`` / ``batch_25`` (the default) / ``batch_50``: ``enqueue_many("jobs.noop")``
  with that ``CONVEYOR_BATCH_SIZE``.

The clock runs from just before the first publish (for Conveyor: before the bulk INSERT) to
the end of the last task (raw: a Redis stamp each task writes; Conveyor: the last
``finished_at``). Ratios are taken per round against the same round's raw variant.
Also: the SQL statements of the worker's hot path, counted in-process (single and batched).
"""

import os
import time

from bench import harness

N = int(os.environ.get("BENCH_JOBS") or 3000)
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY") or 2)
BATCHES = {"batch_10": 10, "batch_25": 25, "batch_50": 50}
TIMEOUT = 300


def create_floor_table() -> None:
    from django.db import connection

    from bench.tasks import FLOOR_TABLE

    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id bigserial PRIMARY KEY, "
            "status varchar(16) NOT NULL, attempts integer NOT NULL DEFAULT 0, "
            "locked_by varchar(200) NOT NULL DEFAULT '', payload jsonb NOT NULL DEFAULT '{}', "
            "started_at timestamptz, finished_at timestamptz)"
        )
        cursor.execute(f"TRUNCATE {FLOOR_TABLE}")


def wait_counter(key: str, n: int) -> float:
    """Wait for ``n`` raw tasks to have counted under ``key``; return when the last ended."""
    from bench.tasks import counter

    deadline = time.monotonic() + TIMEOUT
    while int(counter().get(key) or 0) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"{key}: only {counter().get(key)} of {n} ran in {TIMEOUT}s")
        time.sleep(0.02)
    return float(counter().get("bench:last"))


def run_raw_noop(n: int) -> float:
    from bench.tasks import counter
    from project.celery import app

    counter().delete("bench:raw_noop")
    started = time.time()
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            app.send_task("bench.raw_noop", queue="default", producer=producer)
    return wait_counter("bench:raw_noop", n) - started


def run_raw_floor(n: int) -> float:
    from django.db import connection

    from bench.tasks import FLOOR_TABLE, counter
    from project.celery import app

    counter().delete("bench:raw_two_updates")
    started = time.time()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {FLOOR_TABLE} (status) SELECT 'queued' FROM generate_series(1, %s) "
            "RETURNING id",
            [n],
        )
        ids = [row[0] for row in cursor.fetchall()]
    with app.producer_or_acquire() as producer:
        for row_id in ids:
            app.send_task(
                "bench.raw_two_updates", args=[row_id], queue="default", producer=producer
            )
    seconds = wait_counter("bench:raw_two_updates", n) - started
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {FLOOR_TABLE} WHERE status = 'succeeded'")
        if cursor.fetchone()[0] != n:
            raise SystemExit("raw_floor: not every row was completed")
        cursor.execute(f"TRUNCATE {FLOOR_TABLE}")
    return seconds


def run_conveyor(n: int, batch_size: int) -> float:
    from django.db import connection
    from django.db.models import Max
    from django.test.utils import override_settings

    from jobs import services
    from jobs.models import Job, JobStatus

    started = time.time()
    with override_settings(CONVEYOR_BATCH_SIZE=batch_size):
        services.enqueue_many("jobs.noop", [{} for _ in range(n)])
    deadline = time.monotonic() + TIMEOUT
    while Job.objects.filter(status=JobStatus.SUCCEEDED).count() < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs batch={batch_size}: not all succeeded in {TIMEOUT}s")
        time.sleep(0.02)
    finished = Job.objects.aggregate(last=Max("finished_at"))["last"].timestamp()
    if Job.objects.exclude(status=JobStatus.SUCCEEDED).exists():
        raise SystemExit(f"jobs batch={batch_size}: some jobs did not succeed")
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job CASCADE")
    return finished - started


def statements_per_job() -> dict:
    """Count the worker's SQL statements in-process: one job alone, and three in a batch."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from jobs import services
    from jobs.models import Job
    from jobs.tasks import noop

    found = {}
    for name, count in (("single", 1), ("batch_of_3", 3)):
        jobs = [services.enqueue("jobs.noop", {}) for _ in range(count)]
        ids = jobs[0].pk if count == 1 else [job.pk for job in jobs]
        with CaptureQueriesContext(connection) as queries:
            noop(ids)
        if Job.objects.filter(pk__in=[j.pk for j in jobs], status="succeeded").count() != count:
            raise SystemExit(f"in-process {name} run did not succeed")
        kinds = [q["sql"].split()[0] for q in queries.captured_queries]
        found[f"sql_statements_{name}"] = f"{len(kinds)}: {' + '.join(kinds)}"
    Job.objects.all().delete()
    harness.purge("default")
    return found


def main() -> dict:
    env = harness.configure_environment()
    harness.prepare_database()
    harness.setup_django()
    import bench.tasks  # noqa: F401 - registers the raw tasks with this process's app

    create_floor_table()
    harness.purge("default")
    statements = statements_per_job()

    variants = {
        "raw_noop": run_raw_noop,
        "raw_floor": run_raw_floor,
        "single": lambda n: run_conveyor(n, 1),
        **{name: (lambda n, size=size: run_conveyor(n, size)) for name, size in BATCHES.items()},
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    cpu_ms: dict[str, list[float]] = {name: [] for name in variants}
    worker = harness.start_worker(env, concurrency=CONCURRENCY)
    try:
        run_raw_noop(200)  # warm up: each pool child connects to Redis and PostgreSQL
        run_conveyor(200, 25)
        for round_no in range(harness.ROUNDS):
            for name in harness.order(list(variants), round_no):
                cpu = harness.cpu_seconds(worker)
                seconds[name].append(variants[name](N))
                cpu_ms[name].append((harness.cpu_seconds(worker) - cpu) / N * 1000)
                print(f"round {round_no + 1} {name}: {N / seconds[name][-1]:.0f}/s", flush=True)
    finally:
        worker.stop()

    rate = {name: [N / s for s in values] for name, values in seconds.items()}
    results = {"jobs_per_round": N, "worker": f"prefork x {CONCURRENCY}, prefetch 1, acks late"}
    for name in variants:
        results[f"{name}_per_s"] = harness.summary(rate[name])
        results[f"{name}_worker_cpu_ms_per_job"] = harness.summary(cpu_ms[name], 2)
    results["raw_floor_vs_raw_noop"] = harness.ratio_summary(rate["raw_floor"], rate["raw_noop"])
    results["single_vs_raw_floor"] = harness.ratio_summary(rate["single"], rate["raw_floor"])
    results["single_vs_raw_noop"] = harness.ratio_summary(rate["single"], rate["raw_noop"])
    for name in BATCHES:
        results[f"{name}_vs_raw_noop"] = harness.ratio_summary(rate[name], rate["raw_noop"])
    results.update(statements)
    harness.record("jobs", results)
    return results


if __name__ == "__main__":
    main()
