"""Tasks the benchmarks run: raw Celery baselines and two small Conveyor jobs.

* ``bench.raw_noop``: a raw Celery no-op, the baseline for ``jobs.noop``;
* ``bench.raw_two_updates``: raw Celery doing a claim-like and a complete-like single-row
  UPDATE, each its own commit, on ``bench_floor``: the floor of one job per message;
* ``bench.limited_noop``: ``jobs.noop`` with a global concurrency limit no run reaches (1,000):
  what the limited claim costs when it holds nothing back;
* ``bench.raw_stamp`` / ``bench.job_stamp``: push ``time.time()`` at body start to a Redis
  list, for pickup latency; ``bench.raw_claim_stamp`` the same after claiming a
  ``bench_floor`` row: the floor of a durable job's pickup.

Each raw task counts itself with ``bench.counting`` (which also stamps ``bench:last``, the
time it finished, and ``bench:ready`` when the worker is ready), as the baselines' no-ops do.
"""

import os
import time

from celery import shared_task

from bench.counting import count, counter
from jobs.limits import Limit
from jobs.task import JobContext, JobTask

FLOOR_TABLE = "bench_floor"


@shared_task(name="bench.raw_noop", ignore_result=True, acks_late=True)
def raw_noop() -> None:
    """Do nothing but count the run, so the benchmark knows when all have finished."""
    count("bench:raw_noop")


@shared_task(name="bench.raw_two_updates", ignore_result=True, acks_late=True)
def raw_two_updates(row_id: int) -> None:
    """Claim and complete one ``bench_floor`` row: two single-row UPDATEs, two commits."""
    from django.db import connection

    worker = f"bench/{os.getpid()}"
    with connection.cursor() as cursor:  # autocommit: each statement is its own commit
        cursor.execute(
            f"UPDATE {FLOOR_TABLE} SET status = 'running', attempts = attempts + 1, "
            "locked_by = %s, started_at = now() WHERE id = %s AND status = 'queued' "
            "RETURNING id, payload",
            [worker, row_id],
        )
        if cursor.fetchone() is not None:
            cursor.execute(
                f"UPDATE {FLOOR_TABLE} SET status = 'succeeded', locked_by = '', "
                "finished_at = now() WHERE id = %s AND locked_by = %s AND status = 'running'",
                [row_id, worker],
            )
    count("bench:raw_two_updates")


@shared_task(name="bench.raw_claim_stamp", ignore_result=True, acks_late=True)
def raw_claim_stamp(row_id: int, key: str) -> None:
    """Claim one ``bench_floor`` row (one single-row UPDATE, its own commit), then push
    ``time.time()``: the least a job recorded in the database does before its body starts."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {FLOOR_TABLE} SET status = 'running', attempts = attempts + 1, "
            "locked_by = %s, started_at = now() WHERE id = %s AND status = 'queued' "
            "RETURNING id",
            [f"bench/{os.getpid()}", row_id],
        )
        claimed = cursor.fetchone() is not None
    if claimed:
        counter().rpush(key, repr(time.time()))


@shared_task(name="bench.raw_stamp", ignore_result=True, acks_late=True)
def raw_stamp(key: str) -> None:
    counter().rpush(key, repr(time.time()))


@shared_task(base=JobTask, name="bench.job_stamp")
def job_stamp(ctx: JobContext) -> None:
    counter().rpush(ctx.payload["key"], repr(time.time()))


@shared_task(base=JobTask, name="bench.limited_noop", limit=Limit(concurrency=1000))
def limited_noop(ctx: JobContext) -> None:
    """Do nothing, under a limit that never binds."""
