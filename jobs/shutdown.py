"""Graceful shutdown: a stopping worker hands its running jobs back instead of leaving them.

On SIGTERM (or Ctrl-C) Celery's warm shutdown stops taking messages and waits for running
tasks. Conveyor gives them ``CONVEYOR_SHUTDOWN_GRACE`` (30 s) to finish; then the worker's main
process asks every pool child (``SIGUSR2``) to stop its job:

* a cooperative task (``JobTask.stops_on_shutdown = True``: deployments) sees
  ``requested()`` become true and winds down itself — a deployment stops its step (SIGTERM,
  then SIGKILL after the step grace) and ends ``failed/worker_shutdown``;
* any other body is interrupted by a ``WorkerShutdown`` exception, and jobs.completer puts the
  job back to ``retrying`` at once, its lease released and its attempt given back, published
  for another worker;
* jobs of a batch not started yet are published again.

A few seconds later the main process hands back, through the same completer, any run of this
worker still marked running (a thread pool's job, or a child that did not answer), so nothing
looks alive after the worker is gone.
"""

import contextlib
import logging
import os
import signal
import threading
from pathlib import Path

from celery import signals
from django.db import close_old_connections

from jobs import completer, outcome
from jobs.errors import WorkerShutdown
from jobs.models import Job, JobStatus

logger = logging.getLogger("jobs")
_requested = threading.Event()
_state = {"in_body": False, "cooperative": False, "child": None, "sigterm_installed": None}
# After the children were asked, how long before the main process hands back what is left.
SETTLE_SECONDS = 5.0


def requested() -> bool:
    """Whether this worker process was asked to give its running jobs back."""
    return _requested.is_set()


class running_body:  # noqa: N801 - used as a context manager around a body
    """Mark that a body runs now, so a shutdown request interrupts it (unless cooperative)."""

    def __init__(self, cooperative: bool) -> None:
        self.cooperative = cooperative

    def __enter__(self):
        pid = os.getpid()
        # Only in a prefork pool child: a worker's main process keeps Celery's handlers.
        if _state["child"] == pid:
            if _state["sigterm_installed"] != pid:
                _defer_sigterm()
            if signal.getsignal(signal.SIGUSR2) is not _on_request:
                signal.signal(signal.SIGUSR2, _on_request)
        _state.update(in_body=True, cooperative=self.cooperative)
        if _requested.is_set() and not self.cooperative:
            raise WorkerShutdown("the worker is shutting down")
        return self

    def __exit__(self, *exc) -> None:
        _state.update(in_body=False, cooperative=False)


def _on_request(signum, frame) -> None:
    _requested.set()
    if _state["in_body"] and not _state["cooperative"]:
        raise WorkerShutdown("the worker shut down before the job finished")


@signals.worker_process_init.connect
def _install_in_child(**kwargs) -> None:
    """Mark this process a pool child; its SIGUSR2 handler is (re)installed at each body.

    billiard resets a child's signal handlers after this initializer runs, and when its pool
    has threads (a transport without an event loop: the embedded filesystem broker) it sets
    SIGUSR2 to its own exit handler too, which would end a body with ``SystemExit(-244)``
    instead of handing it back.
    """
    _state["child"] = os.getpid()
    signal.signal(signal.SIGUSR2, _on_request)


def _defer_sigterm() -> None:
    """In a pool child, a SIGTERM that arrives during a body waits for the main process.

    A process manager that signals the worker's whole process group (honcho, systemd's
    default KillMode) reaches the pool children too, and billiard would end the body with
    ``SystemExit`` at once; the grace and the hand-back belong to the main process instead.
    Between bodies, the child stops as billiard means it to. Installed at the first body,
    after billiard has set its own handlers.
    """
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame) -> None:
        if _state["in_body"]:
            return
        if callable(previous):
            previous(signum, frame)
        else:
            raise SystemExit(-(256 - signum))

    signal.signal(signal.SIGTERM, on_sigterm)
    _state["sigterm_installed"] = os.getpid()


@signals.worker_shutting_down.connect
def _on_shutting_down(sender=None, **kwargs) -> None:
    from django.conf import settings

    grace = settings.CONVEYOR_SHUTDOWN_GRACE.total_seconds()
    node = str(sender or "")
    timer = threading.Timer(grace, _hand_back, args=(node,))
    timer.daemon = True
    timer.start()


def _hand_back(node: str) -> None:
    logger.warning("worker.shutdown_grace_over", extra={"worker": node})
    _requested.set()
    for pid in _children(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR2)
    threading.Event().wait(SETTLE_SECONDS)
    close_old_connections()
    hand_back_runs(node)


def hand_back_runs(node: str) -> int:
    """End every run this worker still holds as ``worker_shutdown``; return how many."""
    held = Job.objects.filter(status=JobStatus.RUNNING, locked_by__startswith=f"{node}/")
    count = 0
    event = outcome.Event.lost(outcome.Happened.WORKER_SHUTDOWN, "the worker shut down")
    for job in held:
        count += completer.finish(outcome.decide(event, job), job) is not None
    return count


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found
