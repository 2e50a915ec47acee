"""Pickup latency at idle: commit → body start for a Conveyor job, ``delay()`` → start raw.

One idle worker (prefork × 2, prefetch 1, acks late), one sample at a time, the two sides
alternating (and which goes first alternating too), ``BENCH_SAMPLES`` each (200, or 50 with
``BENCH_QUICK=1``), ``BENCH_SPACING`` seconds apart (0.1) so the worker is idle each time.

* ``conveyor``: ``services.enqueue("bench.job_stamp")`` in ``transaction.atomic()``; the
  clock starts just before the block commits (the id is published on commit) and stops at
  the ``time.time()`` the body pushes to Redis (after the claim UPDATE); ``caller`` is the
  part the caller waits for (the commit and the publish);
* ``raw``: the clock starts just before ``bench.raw_stamp.delay()``; the task body pushes
  ``time.time()`` the same way.
"""

import os
import time
import uuid

from bench import harness

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
    sides = {"raw": sample_raw, "conveyor": sample_conveyor}
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
        results[f"conveyor_vs_raw_{q}"] = round(
            results[f"conveyor_{q}_ms"] / results[f"raw_{q}_ms"], 2
        )
    harness.record("latency", results)
    return results


if __name__ == "__main__":
    main()
