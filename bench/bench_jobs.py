"""Job engine throughput: no-op jobs end to end, side by side with raw Celery and two baselines.

Every worker is a ``celery worker``, prefork × ``BENCH_CONCURRENCY`` (2), acks late, prefetch
1, no result backend writes, started the same way. Conveyor's worker serves Conveyor's
variants and the raw tasks on Redis ``BENCH_REDIS_URL``; each baseline has a worker, a Redis
database and a queue of its own (``bench.baselines``), so no worker sees another's messages:

* ``plain_django``: a minimal Django project with Celery and no Conveyor app
  (``bench.baseline_django``), a ``@shared_task`` no-op: the alternative to Conveyor;
* ``bare_celery``: a Celery app without Django (``bench.baseline_celery``): Celery's ceiling;
* ``raw_noop``: raw Celery inside Conveyor's worker (its signal handlers attached),
  ``send_task`` of a task that increments a Redis counter, as the baselines' no-ops do;
* ``raw_floor``: raw Celery in Conveyor's worker, one message per row of a bench table, the
  task doing a claim-like and a complete-like single-row UPDATE, each its own commit (rows
  inserted by one INSERT inside the clock): the floor of "claim + complete" per message;
* ``single``: ``enqueue_many("jobs.noop")`` with ``CONVEYOR_BATCH_SIZE=1`` (one message
  per job: the lean single path);
* ``batch_10`` / ``batch_25`` (the default) / ``batch_50``: ``enqueue_many("jobs.noop")``
  with that ``CONVEYOR_BATCH_SIZE``;
* ``limited_25``: ``enqueue_many("bench.limited_noop")``, batches of 25, a task whose global
  ``Limit(concurrency=1000)`` never binds: each claim takes the limited path's turn.

Two measurements, each in interleaved rounds (5, or 2 with ``BENCH_QUICK=1``; the order
rotates each round) of ``BENCH_JOBS`` (3,000) jobs or tasks per variant:

* **steady**: the three workers run throughout; the clock runs from just before the first
  publish (for Conveyor: before the bulk INSERT) to the end of the last task (raw and
  baselines: a Redis stamp each task writes; Conveyor: the last ``finished_at``);
* **drain** (``plain_django``, ``bare_celery``, ``raw_noop``, ``single``, ``batch_25``): the
  backlog is published (for Conveyor: enqueued and committed, so published on commit) while
  no worker reads that queue, then a fresh worker is started. The clock runs from the end
  of the first task to the end of the last (raw and baselines: the Redis stamps each task
  writes, ``bench.counting``; Conveyor: the first and last ``finished_at``, which are its
  bodies' own times), the same for every variant: a worker takes messages before its
  ``worker_ready`` handlers are done, so the ready signal is no common start. ``startup_s``
  is the start command to the first task's end, and the ``cold`` ratios clock from the
  start command instead.

Ratios are taken per round against the same round's other variant. Also: the worker's CPU per
job in the steady rounds, and the SQL statements of the worker's hot path, counted
in-process (single and batched).
"""

import contextlib
import os
import signal
import time

from bench import baselines, harness

N = int(os.environ.get("BENCH_JOBS") or 3000)
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY") or 2)
BATCHES = {"batch_10": 10, "batch_25": 25, "batch_50": 50}
DRAINED = ("plain_django", "bare_celery", "raw_noop", "single", "batch_25")
BASELINES = ("plain_django", "bare_celery")
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


def wait_counter(key: str, n: int, client=None) -> float:
    """Wait for ``n`` tasks to have counted under ``key``; return when the last one ended.

    ``client`` is the Redis database the tasks count in (Conveyor's worker's by default).
    """
    from bench.counting import LAST, counter

    client = client or counter()
    deadline = time.monotonic() + TIMEOUT
    while int(client.get(key) or 0) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"{key}: only {client.get(key)} of {n} ran in {TIMEOUT}s")
        time.sleep(0.02)
    return float(client.get(LAST))


def publish_raw_noop(n: int) -> None:
    from bench.tasks import counter
    from project.celery import app

    counter().delete("bench:raw_noop")
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            app.send_task("bench.raw_noop", queue="default", producer=producer)


def run_raw_noop(n: int) -> float:
    started = time.time()
    publish_raw_noop(n)
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


def enqueue_noops(n: int, batch_size: int, task: str = "jobs.noop") -> None:
    from django.test.utils import override_settings

    from jobs import services

    with override_settings(CONVEYOR_BATCH_SIZE=batch_size):
        services.enqueue_many(task, [{} for _ in range(n)])


def wait_jobs(n: int, *, first: bool = False):
    """Wait for ``n`` jobs to have succeeded; return the last ``finished_at`` (and the first,
    if ``first``); empty the table."""
    from django.db import connection
    from django.db.models import Max, Min

    from jobs.models import Job, JobStatus

    deadline = time.monotonic() + TIMEOUT
    while Job.objects.filter(status=JobStatus.SUCCEEDED).count() < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs: not all {n} succeeded in {TIMEOUT}s")
        time.sleep(0.02)
    ends = Job.objects.aggregate(first=Min("finished_at"), last=Max("finished_at"))
    finished = ends["last"].timestamp()
    if Job.objects.exclude(status=JobStatus.SUCCEEDED).exists():
        raise SystemExit("jobs: some jobs did not succeed")
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job CASCADE")
    return (ends["first"].timestamp(), finished) if first else finished


def run_conveyor(n: int, batch_size: int, task: str = "jobs.noop") -> float:
    started = time.time()
    enqueue_noops(n, batch_size, task)
    return wait_jobs(n) - started


def run_baseline(baseline: baselines.Baseline, n: int) -> float:
    baseline.counter.delete(baselines.COUNTED)
    started = time.time()
    baseline.publish(n)
    return wait_counter(baselines.COUNTED, n, baseline.counter) - started


def stop_conveyor_worker(worker) -> None:
    """Stop a Conveyor worker, and any pool child it left behind; drop its log."""
    worker.stop()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)
    worker.log_path.unlink(missing_ok=True)


def drain_conveyor(env: dict, name: str) -> tuple[float, float, float]:
    """Publish or enqueue ``N``, then start a fresh Conveyor worker: (command, first, last)."""
    from bench.counting import FIRST, LAST, counter

    harness.purge("default")
    counter().delete(FIRST, LAST)
    if name == "raw_noop":
        publish_raw_noop(N)
    else:
        enqueue_noops(N, 1 if name == "single" else BATCHES[name])
    started = time.time()
    worker = harness.start_worker(env, concurrency=CONCURRENCY)
    try:
        if name == "raw_noop":
            last = wait_counter("bench:raw_noop", N)
            first = float(counter().get(FIRST))
        else:
            first, last = wait_jobs(N, first=True)
    finally:
        stop_conveyor_worker(worker)
    return started, first, last


def drain_baseline(env: dict, baseline: baselines.Baseline) -> tuple[float, float, float]:
    """Publish ``N``, then start a fresh worker of ``baseline``: (command, first, last)."""
    from bench.counting import FIRST

    baseline.reset()
    baseline.publish(N)
    worker = baseline.start(env, concurrency=CONCURRENCY)
    try:
        last = wait_counter(baselines.COUNTED, N, baseline.counter)
        first = float(baseline.counter.get(FIRST))
    finally:
        worker.stop()
    return worker.started, first, last


def statements_per_job() -> dict:
    """Count the worker's SQL statements in-process: one job alone, a batch of 25, and a batch
    of 25 under a limit that doesn't bind (each after one of the same kind: its statements are
    prepared then (jobs.prepared), and a batch's bodies' run time is known: jobs.batches)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from bench.tasks import limited_noop
    from jobs import services
    from jobs.models import Job
    from jobs.tasks import noop

    found = {}
    for name, count, task in (
        ("warm_up_single", 1, noop),
        ("single", 1, noop),
        ("warm_up", 25, noop),
        ("batch_of_25", 25, noop),
        ("warm_up_limited", 25, limited_noop),
        ("limited_batch_of_25", 25, limited_noop),
    ):
        jobs = [services.enqueue(task.name, {}) for _ in range(count)]
        ids = jobs[0].pk if count == 1 else [job.pk for job in jobs]
        with CaptureQueriesContext(connection) as queries:
            task(ids)
        if Job.objects.filter(pk__in=[j.pk for j in jobs], status="succeeded").count() != count:
            raise SystemExit(f"in-process {name} run did not succeed")
        kinds = [q["sql"].split()[0] for q in queries.captured_queries]
        if not name.startswith("warm_up"):
            found[f"sql_statements_{name}"] = f"{len(kinds)}: {' + '.join(kinds)}"
    Job.objects.all().delete()
    harness.purge("default")
    return found


def steady(env: dict, found: dict[str, baselines.Baseline]) -> tuple[dict, dict]:
    """The steady rounds, all three workers running: (jobs/s, worker CPU ms/job) per variant."""
    variants = {
        "raw_noop": run_raw_noop,
        "raw_floor": run_raw_floor,
        "single": lambda n: run_conveyor(n, 1),
        **{name: (lambda n, size=size: run_conveyor(n, size)) for name, size in BATCHES.items()},
        "limited_25": lambda n: run_conveyor(n, 25, "bench.limited_noop"),
        **{name: (lambda n, b=found[name]: run_baseline(b, n)) for name in BASELINES},
    }
    rate: dict[str, list[float]] = {name: [] for name in variants}
    cpu_ms: dict[str, list[float]] = {name: [] for name in variants}
    workers = {}
    try:
        workers["conveyor"] = harness.start_worker(env, concurrency=CONCURRENCY)
        for name in BASELINES:
            workers[name] = found[name].start(env, concurrency=CONCURRENCY)
        run_raw_noop(200)  # warm up: each pool child connects to Redis and PostgreSQL
        run_conveyor(200, 25)
        run_conveyor(200, 25, "bench.limited_noop")
        for name in BASELINES:
            run_baseline(found[name], 200)
        for round_no in range(harness.ROUNDS):
            for name in harness.order(list(variants), round_no):
                worker = workers.get(name) or workers["conveyor"]
                cpu = harness.cpu_seconds(worker)
                rate[name].append(N / variants[name](N))
                cpu_ms[name].append((harness.cpu_seconds(worker) - cpu) / N * 1000)
                print(f"steady round {round_no + 1} {name}: {rate[name][-1]:.0f}/s", flush=True)
    finally:
        for name, worker in workers.items():
            if name == "conveyor":
                stop_conveyor_worker(worker)
            else:
                worker.stop()
    return rate, cpu_ms


def drain(env: dict, found: dict[str, baselines.Baseline]) -> tuple[dict, dict, dict]:
    """The drain rounds, a fresh worker each: (jobs/s from the first job's end to the last's,
    jobs/s from the start command, seconds from the command to the first job's end)."""
    rate: dict[str, list[float]] = {name: [] for name in DRAINED}
    cold: dict[str, list[float]] = {name: [] for name in DRAINED}
    startup: dict[str, list[float]] = {name: [] for name in DRAINED}
    for round_no in range(harness.ROUNDS):
        for name in harness.order(list(DRAINED), round_no):
            if name in found:
                started, first, last = drain_baseline(env, found[name])
            else:
                started, first, last = drain_conveyor(env, name)
            rate[name].append((N - 1) / (last - first))
            cold[name].append(N / (last - started))
            startup[name].append(first - started)
            print(
                f"drain round {round_no + 1} {name}: {rate[name][-1]:.0f}/s first to last "
                f"(start-up {startup[name][-1]:.2f} s)",
                flush=True,
            )
    return rate, cold, startup


def ratios(prefix: str, rate: dict, pairs: list[tuple[str, str]]) -> dict:
    return {
        f"{prefix}{a}_vs_{b}": harness.ratio_summary(rate[a], rate[b])
        for a, b in pairs
        if a in rate and b in rate
    }


def main() -> dict:
    env = harness.configure_environment()
    harness.prepare_database()
    harness.setup_django()
    import bench.tasks  # noqa: F401 - registers the raw tasks with this process's app

    create_floor_table()
    harness.purge("default")
    found = {baseline.name: baseline for baseline in baselines.baselines()}
    for baseline in found.values():
        baseline.reset()
    statements = statements_per_job()
    load_before = os.getloadavg()

    rate, cpu_ms = steady(env, found)
    drain_rate, drain_cold, startup = drain(env, found)

    results = {
        "jobs_per_round": N,
        "worker": f"prefork x {CONCURRENCY}, prefetch 1, acks late",
        "load_average": f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after",
    }
    for name in rate:
        results[f"{name}_per_s"] = harness.summary(rate[name])
        results[f"{name}_worker_cpu_ms_per_job"] = harness.summary(cpu_ms[name], 2)
    conveyor = ["single", *BATCHES]
    pairs = [
        ("raw_noop", "plain_django"),
        ("plain_django", "bare_celery"),
        ("raw_floor", "raw_noop"),
        ("single", "raw_floor"),
        ("single", "raw_noop"),
        *[(name, "raw_noop") for name in BATCHES],
        ("limited_25", "batch_25"),
        *[(name, baseline) for name in conveyor for baseline in BASELINES],
    ]
    results.update(ratios("", rate, pairs))
    for name in DRAINED:
        results[f"drain_{name}_per_s"] = harness.summary(drain_rate[name])
        results[f"drain_{name}_startup_s"] = harness.summary(startup[name], 2)
    results.update(ratios("drain_", drain_rate, pairs))
    results.update(ratios("drain_cold_", drain_cold, [("batch_25", b) for b in BASELINES]))
    results["targets"] = targets(results)
    results.update(statements)
    harness.record("jobs", results)
    return results


def targets(results: dict) -> str:
    """The issue's throughput targets, steady (and drain where there is one): met or not."""
    goals = [
        (f"{prefix}batch_25_vs_{baseline}", goal)
        for baseline, goal in (("plain_django", 1.7), ("bare_celery", 1.0))
        for prefix in ("", "drain_")
    ]
    goals += [("limited_25_vs_batch_25", 0.9), ("single_vs_raw_floor", 0.9)]
    found = []
    for key, goal in goals:
        median = results[key]["median"]
        mark = "met" if median >= goal else "missed"
        found.append(f"{key} {median} >= {goal} {mark}")
    return "; ".join(found)


if __name__ == "__main__":
    main()
