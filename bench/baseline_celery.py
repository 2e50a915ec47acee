"""Bare Celery, no Django: the ceiling of a Celery worker for the throughput benchmark.

``celery -A bench.baseline_celery worker --queues bare_celery`` (``bench.baselines`` names
the queue and starts the worker as Conveyor's is started: prefork, the same concurrency, no
gossip, mingle or heartbeat). The broker is ``BENCH_BROKER_URL``, a Redis database no other
worker reads. The settings are the ones Conveyor's own tasks run with: acks late, prefetch 1,
JSON, no result backend; Celery's two log lines per task are off, as in Conveyor's worker.

``baseline.noop`` counts itself in ``BENCH_COUNTER_URL`` exactly as ``bench.raw_noop`` does.
"""

import logging
import os

from celery import Celery, signals

from bench.counting import count

app = Celery("baseline_celery", broker=os.environ.get("BENCH_BROKER_URL"))
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="baseline.noop", ignore_result=True, acks_late=True)
def noop() -> None:
    """Do nothing but count the run."""
    count("bench:baseline_noop")


@signals.after_setup_logger.connect
def _quiet_per_task_lines(**kwargs) -> None:
    """Silence Celery's "Task … received" and "… succeeded in" lines, as Conveyor's LOGGING does."""
    for name in ("celery.worker.strategy", "celery.app.trace"):
        logging.getLogger(name).setLevel(logging.WARNING)
