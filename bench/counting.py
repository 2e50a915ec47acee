"""The Redis counter and time stamps of the throughput benchmark, in any worker.

It imports neither Django nor Conveyor, so the baseline workers (``bench.baseline_celery``,
``bench.baseline_django``) count exactly as Conveyor's worker does. Each worker process reads
``BENCH_COUNTER_URL`` (its own Redis database):

* ``count(key)``: ``INCR key``, set ``bench:last`` to the time the task finished and
  ``bench:first`` to it if unset, in one round trip, so the benchmark reads when the first
  and the last task ended rather than when its poll noticed.
"""

import os
import time

import redis

FIRST = "bench:first"
LAST = "bench:last"
_counter = None


def counter() -> redis.Redis:
    """This process's client for ``BENCH_COUNTER_URL`` (made after a pool child forks)."""
    global _counter
    if _counter is None:
        _counter = redis.Redis.from_url(os.environ["BENCH_COUNTER_URL"])
    return _counter


def count(key: str) -> None:
    """Count one finished task under ``key`` and stamp ``bench:last``."""
    pipe = counter().pipeline(transaction=False)
    now = repr(time.time())
    pipe.incr(key)
    pipe.set(LAST, now)
    pipe.set(FIRST, now, nx=True)
    pipe.execute()
