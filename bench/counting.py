"""The Redis counter and time stamps of the throughput benchmark, in any worker.

It imports neither Django nor Conveyor, so the baseline workers (``bench.baseline_celery``,
``bench.baseline_django``) count exactly as Conveyor's worker does. Each worker process reads
``BENCH_COUNTER_URL`` (its own Redis database):

* ``count(key)``: ``INCR key`` and set ``bench:last`` to the time the task finished, in one
  round trip, so the benchmark reads when the last task ended rather than when its poll
  noticed;
* at ``worker_ready`` (the consumer is about to take its first message) the worker's main
  process sets ``bench:ready`` to the time, which starts the drain clock.
"""

import os
import time

import redis
from celery import signals

LAST = "bench:last"
READY = "bench:ready"
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
    pipe.incr(key)
    pipe.set(LAST, repr(time.time()))
    pipe.execute()


@signals.worker_ready.connect(dispatch_uid="bench.counting.ready")
def _stamp_ready(**kwargs) -> None:
    # A client of its own, closed at once: the main process keeps none for later forks.
    with redis.Redis.from_url(os.environ["BENCH_COUNTER_URL"]) as client:
        client.set(READY, repr(time.time()))
