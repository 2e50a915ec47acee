"""The worker registry: each Celery worker writes its own ``WorkerHeartbeat`` row every few seconds.

Not to be confused with a run's lease renewal (``jobs.lease``, ``ctx.heartbeat()``): this
module says which *workers* are alive, for the dashboard and the metrics; it renews no lease.

A daemon thread started when the worker is ready (``worker_ready``) upserts the row with the
worker's queues, pool and concurrency and ``last_seen_at = now`` every
``CONVEYOR_WORKER_HEARTBEAT`` (5s); a graceful shutdown stamps ``stopped_at``. The dashboard
shows a worker not seen for three intervals as gone, and what each live worker is running
from the job rows it holds (``locked_by`` starts with its node name). After each beat the
thread offers to run the ``account_jobs`` maintenance runner (``jobs.maintenance.accounting``:
fold the job count deltas, refresh the minute rollup), at most once per half interval across
all workers. An app adds work to every report with ``on_report(hook)`` (the deployments app keeps
its Deployer rows so): each hook gets the worker's description (name, queues, pool,
concurrency, started_at). A failed write, run or hook is logged and tried again on the next
report: the registry must never take a worker down.
"""

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from celery import signals
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from jobs.maintenance import runs
from jobs.maintenance.accounting import account
from jobs.models import WorkerHeartbeat

logger = logging.getLogger("jobs")
# A worker missing this many reports is shown as gone.
GONE_AFTER_REPORTS = 3
# Rows of workers gone this long are deleted (by any live worker's report).
FORGET_AFTER = timedelta(days=1)

_state: dict[str, object] = {"thread": None, "stop": None, "name": None}
_hooks: dict[str, Callable[[dict], None]] = {}


def on_report(hook: Callable[[dict], None], *, name: str) -> None:
    """Call ``hook(worker description)`` after each report of every worker (once per ``name``)."""
    _hooks[name] = hook


def report_interval() -> timedelta:
    """How often a worker writes its row (``CONVEYOR_WORKER_HEARTBEAT``)."""
    return settings.CONVEYOR_WORKER_HEARTBEAT


def gone_before(now: datetime | None = None) -> datetime:
    """Return the ``last_seen_at`` before which a worker counts as gone."""
    return (now or timezone.now()) - GONE_AFTER_REPORTS * report_interval()


def worker_report(
    *, name: str, queues: list[str], pool: str, concurrency: int, started_at: datetime
) -> None:
    """Write this worker's row (one upsert) and forget workers gone for a day."""
    now = timezone.now()
    WorkerHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "queues": queues,
            "pool": pool,
            "concurrency": concurrency,
            "started_at": started_at,
            "last_seen_at": now,
            "stopped_at": None,
        },
    )
    WorkerHeartbeat.objects.filter(last_seen_at__lt=now - FORGET_AFTER).delete()


def _loop(stop: threading.Event, info: dict) -> None:
    while True:
        try:
            close_old_connections()
            worker_report(**info)
        # Broad on purpose: an exception would end this daemon thread, and with it every later
        # report, seen by no one; it is logged with its traceback and tried again next time.
        except Exception:
            logger.exception("worker.heartbeat_failed", extra={"worker": info["name"]})
        _run_hooks(info)
        _account()
        if stop.wait(report_interval().total_seconds()):
            break
    connection.close()


def _run_hooks(info: dict) -> None:
    for name, hook in list(_hooks.items()):
        try:
            hook(info)
        except Exception:
            logger.exception("worker.beat_hook_failed", extra={"hook": name})


def _account() -> None:
    # Every worker offers to run the account_jobs runner, so the count deltas stay few and
    # the rollup fresh without beat; its lock and "not too often" check keep it to one run
    # per half interval across all workers. It must never stop the reports (runs.run already
    # contains the service's errors; this catches its own bookkeeping's, logged with traceback).
    try:
        runs.run("account_jobs", account)
    except Exception:
        logger.exception("worker.accounting_failed")


def _describe(consumer) -> dict:
    controller = getattr(consumer, "controller", None)
    pool = getattr(controller, "pool_cls", None) or getattr(controller, "pool", None)
    pool_name = getattr(pool, "__module__", "").rsplit(".", 1)[-1] if pool else ""
    try:
        queues = sorted(q.name for q in consumer.task_consumer.queues)
    except AttributeError:
        queues = sorted(consumer.app.amqp.queues.consume_from or [])
    return {
        "name": consumer.hostname,
        "queues": queues,
        "pool": pool_name,
        "concurrency": int(getattr(controller, "concurrency", 0) or 0),
        "started_at": timezone.now(),
    }


@signals.worker_ready.connect(dispatch_uid="jobs.worker_registry.start")
def start_reporting(sender=None, **kwargs) -> None:
    """Start this worker's reporting thread (once per worker process)."""
    if _state["thread"] is not None:
        return
    info = _describe(sender)
    stop = threading.Event()
    thread = threading.Thread(
        target=_loop, args=(stop, info), name="conveyor-worker-registry", daemon=True
    )
    _state.update(thread=thread, stop=stop, name=info["name"])
    thread.start()


@signals.worker_shutdown.connect(dispatch_uid="jobs.worker_registry.stop")
def stop_reporting(sender=None, **kwargs) -> None:
    """Stop the thread and stamp ``stopped_at``, so the dashboard shows a clean stop."""
    if _state["thread"] is None:
        return
    _state["stop"].set()
    _state["thread"].join(timeout=5)
    try:
        close_old_connections()
        WorkerHeartbeat.objects.filter(name=_state["name"]).update(stopped_at=timezone.now())
    except Exception:  # the worker is stopping: log why its row is not stamped, never block it
        logger.exception("worker.heartbeat_stop_failed", extra={"worker": _state["name"]})
    _state["thread"] = None
