"""Workflows side by side with plain jobs: a group with a callback, and enqueueing a big one.

Two comparisons, each in interleaved rounds whose order rotates each round, on one real
``celery worker`` (prefork × ``BENCH_CONCURRENCY``, 2):

* **run**: a 1,000-member group of ``jobs.noop`` with a callback (``chord``) against 1,000
  independent ``jobs.noop`` jobs (``enqueue_many``) on the same worker. The clock runs from
  just before the enqueue to the last ``finished_at`` (the group: the callback's). Target:
  the group takes at most 1.2× the independent jobs' time.
* **enqueue**: writing a 10,000-node workflow (a group of 9,999 and a callback) against
  ``enqueue_many`` of 10,000 jobs, each in its own transaction, the clock stopped once it
  committed (and its doorbells were published). No worker reads the queue meanwhile.
  Target: at most 1.5×.

The enqueue comparison runs ``BENCH_ROUNDS`` rounds (5, or 2 with ``BENCH_QUICK=1``); the run
comparison three times as many (``BENCH_RUN_ROUNDS``): a run lasts a fraction of a second, so
one busy moment of the machine moves a round by a third, and a median of five is too easily
moved by two of them.

The run also measures the same group without its callback (``group_alone``): the members'
own transactions without the callback's shared row lock, to tell the two costs apart.
"""

import os
import time

from bench import harness

MEMBERS = 1000
ENQUEUED = 10_000
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY") or 2)
TIMEOUT = 300
RUN_ROUNDS = int(os.environ.get("BENCH_RUN_ROUNDS") or 3 * harness.ROUNDS)


def clean() -> None:
    from django.db import connection

    harness.purge("default")
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job, jobs_workflow, jobs_jobdependency CASCADE")


def wait_finished(n: int) -> float:
    """Wait until ``n`` jobs have ended; return the last ``finished_at`` (epoch seconds)."""
    from django.db.models import Max

    from jobs.models import FINISHED, Job

    deadline = time.monotonic() + TIMEOUT
    while Job.objects.filter(status__in=FINISHED).count() < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} jobs did not finish within {TIMEOUT}s")
        time.sleep(0.05)
    return Job.objects.aggregate(last=Max("finished_at"))["last"].timestamp()


def run_independent() -> float:
    from django.db import transaction

    from jobs import services

    started = time.time()
    with transaction.atomic():
        services.enqueue_many("jobs.noop", [{"i": i} for i in range(MEMBERS)])
    return wait_finished(MEMBERS) - started


def run_group() -> float:
    from django.db import transaction

    from jobs import workflows

    started = time.time()
    with transaction.atomic():
        workflows.chord(
            [("jobs.noop", {"i": i}) for i in range(MEMBERS)], ("jobs.noop", {})
        ).enqueue()
    return wait_finished(MEMBERS + 1) - started


def run_group_alone() -> float:
    """The same group without a callback: the members' own transactions, no shared lock."""
    from django.db import transaction

    from jobs import workflows

    started = time.time()
    with transaction.atomic():
        workflows.group(*[("jobs.noop", {"i": i}) for i in range(MEMBERS)]).enqueue()
    return wait_finished(MEMBERS) - started


def enqueue_many() -> float:
    from django.db import transaction

    from jobs import services

    started = time.perf_counter()
    with transaction.atomic():
        services.enqueue_many("jobs.noop", [{"i": i} for i in range(ENQUEUED)])
    return time.perf_counter() - started


def enqueue_workflow() -> float:
    from django.db import transaction

    from jobs import workflows

    started = time.perf_counter()
    with transaction.atomic():
        workflows.chord(
            [("jobs.noop", {"i": i}) for i in range(ENQUEUED - 1)], ("jobs.noop", {})
        ).enqueue()
    return time.perf_counter() - started


def measure(variants: dict, label: str, rounds: int = harness.ROUNDS) -> dict[str, list[float]]:
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for round_no in range(rounds):
        for name in harness.order(list(variants), round_no):
            seconds[name].append(variants[name]())
            clean()
            print(f"{label} round {round_no + 1} {name}: {seconds[name][-1]:.2f}s", flush=True)
    return seconds


def main() -> dict:
    env = harness.configure_environment()
    harness.prepare_database()
    harness.setup_django()
    clean()
    results: dict = {
        "members": MEMBERS,
        "enqueued_nodes": ENQUEUED,
        "concurrency": CONCURRENCY,
        "run_rounds": RUN_ROUNDS,
    }
    enqueue = measure({"enqueue_many": enqueue_many, "workflow": enqueue_workflow}, "enqueue")
    results["enqueue_many_10k_s"] = harness.summary(enqueue["enqueue_many"], 3)
    results["enqueue_workflow_10k_s"] = harness.summary(enqueue["workflow"], 3)
    results["enqueue_workflow_vs_enqueue_many"] = harness.ratio_summary(
        enqueue["workflow"], enqueue["enqueue_many"]
    )
    worker = harness.start_worker(env, concurrency=CONCURRENCY)
    try:
        run_independent()  # warm up the worker's pool
        clean()
        ran = measure(
            {"independent": run_independent, "group": run_group, "group_alone": run_group_alone},
            "run",
            RUN_ROUNDS,
        )
    finally:
        worker.stop()
    results["independent_1000_s"] = harness.summary(ran["independent"], 2)
    results["group_1000_with_callback_s"] = harness.summary(ran["group"], 2)
    results["group_1000_without_callback_s"] = harness.summary(ran["group_alone"], 2)
    results["group_vs_independent"] = harness.ratio_summary(ran["group"], ran["independent"])
    results["group_without_callback_vs_independent"] = harness.ratio_summary(
        ran["group_alone"], ran["independent"]
    )
    harness.record("workflows", results)
    return results


if __name__ == "__main__":
    main()
