"""Pickup latency at idle: commit → body start for a Conveyor job, ``delay()`` → start raw.

One idle worker (prefork × 2, prefetch 1, acks late), one sample at a time, the three sides
taking turns (the order rotating from one turn to the next), ``BENCH_SAMPLES`` each (200, or 50 with
``BENCH_QUICK=1``), ``BENCH_SPACING`` seconds apart (0.1) so the worker is idle each time.

* ``conveyor``: ``services.enqueue("bench.job_stamp")`` in ``transaction.atomic()``; the
  clock starts just before the block commits (the id is published on commit) and stops at
  the ``time.time()`` the body pushes to Redis (after the claim UPDATE); ``caller`` is the
  part the caller waits for (the commit and the publish);
* ``raw``: the clock starts just before ``bench.raw_stamp.delay()``; the task body pushes
  ``time.time()`` the same way;
* ``floor``: the least any job kept in the database does, in raw Celery: the caller inserts
  a row of ``bench_floor`` in a transaction, the clock starts just before it commits, then
  ``bench.raw_claim_stamp.delay()``; the task claims the row (one single-row ``UPDATE``, its
  own commit) and pushes ``time.time()``. Its two commits are the ones a durable job cannot
  skip: the caller's, so the job exists, and the claim's, so a second worker cannot run it.

Ratios: ``conveyor_vs_raw`` (the target: at most 1.5× at p50), ``floor_vs_raw`` (what those
two commits cost by themselves on this machine) and ``conveyor_vs_floor``.
"""

import json
import os
import time
import uuid

from bench import harness
from bench.bench_jobs import create_floor_table

SAMPLES = int(os.environ.get("BENCH_SAMPLES") or (50 if harness.QUICK else 200))
SPACING = float(os.environ.get("BENCH_SPACING") or 0.1)


def sample_conveyor(key: str) -> tuple[float, float]:
    from django.db import transaction

    from jobs import services

    with transaction.atomic():
        services.enqueue("bench.job_stamp", {"key": key})
        started = time.time()
    return started, time.time()  # the commit and the publish on commit are done


def sample_raw(key: str) -> tuple[float, float]:
    from bench.tasks import raw_stamp

    started = time.time()
    raw_stamp.delay(key)
    return started, time.time()


def sample_floor(key: str) -> tuple[float, float]:
    from django.db import connection, transaction

    from bench.tasks import FLOOR_TABLE, raw_claim_stamp

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {FLOOR_TABLE} (status, payload) VALUES ('queued', %s) RETURNING id",
                [json.dumps({"key": key})],
            )
            row_id = cursor.fetchone()[0]
        started = time.time()
    raw_claim_stamp.delay(row_id, key)  # after the commit, as a publish on commit is
    return started, time.time()


def measure(start, key: str) -> tuple[float, float]:
    """Return (start → body start, start → the caller's call returned) in milliseconds."""
    from bench.tasks import counter

    started, returned = start(key)
    got = counter().blpop([key], timeout=30)
    if got is None:
        raise SystemExit(f"no body started within 30 s ({start.__name__})")
    return (float(got[1]) - started) * 1000, (returned - started) * 1000


def main() -> dict:
    env = harness.configure_environment()
    harness.prepare_database()
    harness.setup_django()
    import bench.tasks  # noqa: F401 - registers the benchmark's tasks with this process's app

    harness.purge("default")
    create_floor_table()
    sides = {"raw": sample_raw, "floor": sample_floor, "conveyor": sample_conveyor}
    found: dict[str, list[float]] = {name: [] for name in sides}
    caller: dict[str, list[float]] = {name: [] for name in sides}
    worker = harness.start_worker(env, concurrency=2)
    try:
        for _ in range(10):  # warm up both children's connections
            for start in sides.values():
                measure(start, f"bench:warm:{uuid.uuid4().hex}")
        for i in range(SAMPLES):
            for name in harness.order(list(sides), i):
                latency, returned = measure(sides[name], f"bench:lat:{uuid.uuid4().hex}")
                found[name].append(latency)
                caller[name].append(returned)
                time.sleep(SPACING)
    finally:
        worker.stop()
    results = {"samples": SAMPLES, "spacing_s": SPACING}
    for name, values in found.items():
        results[f"{name}_p50_ms"] = round(harness.percentile(values, 50), 2)
        results[f"{name}_p99_ms"] = round(harness.percentile(values, 99), 2)
        results[f"{name}_max_ms"] = round(max(values), 2)
        # how much of it the caller waits for: Conveyor's commit + publish, raw's delay()
        results[f"{name}_caller_p50_ms"] = round(harness.percentile(caller[name], 50), 2)
    for q in ("p50", "p99"):
        for name, baseline in (("conveyor", "raw"), ("floor", "raw"), ("conveyor", "floor")):
            results[f"{name}_vs_{baseline}_{q}"] = round(
                results[f"{name}_{q}_ms"] / results[f"{baseline}_{q}_ms"], 2
            )
    harness.record("latency", results)
    return results


if __name__ == "__main__":
    main()
