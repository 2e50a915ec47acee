"""Tasks the benchmarks run: a raw Celery no-op as the baseline for ``jobs.noop``."""

import os

import redis
from celery import shared_task

_counter = None


def counter() -> redis.Redis:
    global _counter
    if _counter is None:
        _counter = redis.Redis.from_url(os.environ["BENCH_COUNTER_URL"])
    return _counter


@shared_task(name="bench.raw_noop", ignore_result=True, acks_late=True)
def raw_noop() -> None:
    """Do nothing but count the run, so the benchmark knows when all have finished."""
    counter().incr("bench:raw_noop")
