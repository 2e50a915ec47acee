"""Enqueue rate: ``enqueue_many`` against a bare bulk INSERT of the same rows, side by side.

``BENCH_ENQUEUE`` jobs (50,000, or 10,000 with ``BENCH_QUICK=1``) per round, interleaved
rounds (5, or 2 quick), no worker (the published messages are purged after each round):

* ``insert``: the same ``Job`` rows ``enqueue_many`` builds, written by
  ``Job.objects.bulk_create(batch_size=1000)`` in one transaction: no publish;
* ``enqueue_many``: ``services.enqueue_many("jobs.noop", …)`` in one transaction, with the
  default ``CONVEYOR_BATCH_SIZE`` (25 ids per message), publish on commit included;
* ``enqueue_many_unbatched``: the same with ``CONVEYOR_BATCH_SIZE=1``: one message per job
  (on at most 10,000 jobs: it is the slow one, and its rate does not depend on the count);
* ``enqueue_many_unique``: ``enqueue_many`` with a unique rule by payload key (every key
  new), written by ``INSERT … ON CONFLICT DO NOTHING`` (see jobs.unique);
* ``enqueue_each`` and ``enqueue_each_unique``: one ``enqueue()`` call per job (at most
  5,000), plain and with that unique rule, in one transaction.

Then, once, outside the clock: how many Redis clients kombu builds per published message
(``redis.Redis.__init__`` counted around 1,000 one-job publishes) and the share of a
publish spent building them (cProfile).
"""

import cProfile
import os
import pstats
import time

from bench import harness

N = int(os.environ.get("BENCH_ENQUEUE") or (10_000 if harness.QUICK else 50_000))
UNBATCHED = 10_000  # one message per job is slow: a rate over 10,000 jobs is enough
EACH = 5_000  # one call per job: its rate does not depend on the count either


def jobs_like_enqueue_many(n: int) -> list:
    from django.utils import timezone

    from jobs import conf
    from jobs.models import Job

    now = timezone.now()
    return [
        Job(
            task="jobs.noop",
            queue="default",
            payload={"i": i},
            priority=0,
            max_attempts=conf.get().max_attempts,
            run_after=now,
            published_at=now,
            created_at=now,
            updated_at=now,
        )
        for i in range(n)
    ]


def run_insert(n: int) -> float:
    from django.db import transaction

    from jobs.models import Job

    started = time.perf_counter()
    with transaction.atomic():
        Job.objects.bulk_create(jobs_like_enqueue_many(n), batch_size=1000)
    return time.perf_counter() - started


def _unique_rule(unique: bool):
    from jobs.unique import Unique

    return Unique(keys=("i",)) if unique else None


def run_enqueue_many(n: int, batch_size: int | None = None, unique: bool = False) -> float:
    from django.db import transaction
    from django.test.utils import override_settings

    from jobs import services

    overrides = {} if batch_size is None else {"CONVEYOR_BATCH_SIZE": batch_size}
    rule = _unique_rule(unique)
    started = time.perf_counter()
    with override_settings(**overrides), transaction.atomic():
        services.enqueue_many("jobs.noop", [{"i": i} for i in range(n)], unique=rule)
    return time.perf_counter() - started


def run_enqueue_each(n: int, unique: bool = False) -> float:
    from django.db import transaction

    from jobs import services

    rule = _unique_rule(unique)
    started = time.perf_counter()
    with transaction.atomic():
        for i in range(n):
            services.enqueue("jobs.noop", {"i": i}, unique=rule)
    return time.perf_counter() - started


def clean() -> None:
    from django.db import connection

    harness.purge("default")
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_job CASCADE")


def publish_profile(n: int = 1000) -> dict:
    """Count Redis clients built per one-job publish; profile where a publish goes."""
    import redis
    from django.db import transaction
    from django.test.utils import override_settings

    from jobs.models import Job
    from jobs.publish import publish

    with transaction.atomic():
        jobs = Job.objects.bulk_create(jobs_like_enqueue_many(n))
    built = [0]
    original = redis.Redis.__init__

    def counting(self, *args, **kwargs):
        built[0] += 1
        original(self, *args, **kwargs)

    redis.Redis.__init__ = counting
    try:
        with override_settings(CONVEYOR_BATCH_SIZE=1):
            started = time.perf_counter()
            publish(jobs)
            seconds = time.perf_counter() - started
            profile = cProfile.Profile()
            profile.enable()
            publish(jobs)
            profile.disable()
    finally:
        redis.Redis.__init__ = original
    stats = pstats.Stats(profile)
    total = max(row[3] for row in stats.stats.values())  # cumulative time of the outermost
    create = sum(row[3] for (path, _, name), row in stats.stats.items() if name == "_create_client")
    clean()
    return {
        "publish_one_job_per_message_ms": round(seconds / n * 1000, 3),
        "redis_clients_built_per_publish": round(built[0] / (2 * n), 2),
        "publish_share_in_kombu_create_client": round(create / total, 3),
    }


def main() -> dict:
    harness.configure_environment()
    harness.prepare_database()
    harness.setup_django()
    clean()
    variants = {
        "insert": run_insert,
        "enqueue_many": run_enqueue_many,
        "enqueue_many_unbatched": lambda n: run_enqueue_many(n, 1),
        "enqueue_many_unique": lambda n: run_enqueue_many(n, unique=True),
        "enqueue_each": run_enqueue_each,
        "enqueue_each_unique": lambda n: run_enqueue_each(n, unique=True),
    }
    counts = {"enqueue_many_unbatched": min(N, UNBATCHED)}
    counts.update(dict.fromkeys(("enqueue_each", "enqueue_each_unique"), min(N, EACH)))
    rate: dict[str, list[float]] = {name: [] for name in variants}
    run_insert(1000)  # warm up
    clean()
    for round_no in range(harness.ROUNDS):
        for name in harness.order(list(variants), round_no):
            n = counts.get(name, N)
            rate[name].append(n / variants[name](n))
            clean()
            print(f"round {round_no + 1} {name}: {rate[name][-1]:.0f}/s", flush=True)
    results = {"jobs_per_round": N}
    for name in variants:
        results[f"{name}_per_s"] = harness.summary(rate[name], 0)
    results["enqueue_many_vs_insert"] = harness.ratio_summary(rate["enqueue_many"], rate["insert"])
    results["enqueue_many_unbatched_vs_insert"] = harness.ratio_summary(
        rate["enqueue_many_unbatched"], rate["insert"]
    )
    for unique, plain in (
        ("enqueue_many_unique", "enqueue_many"),
        ("enqueue_each_unique", "enqueue_each"),
    ):
        results[f"{unique}_vs_{plain}"] = harness.ratio_summary(rate[unique], rate[plain])
    results.update(publish_profile())
    harness.record("enqueue", results)
    return results


if __name__ == "__main__":
    main()
