"""One lease keeper per worker process: renews the leases of every job the process runs.

A body that never calls ``ctx.heartbeat()`` still keeps its lease, so the reaper only
recovers jobs whose worker is really gone. Every third of ``CONVEYOR_JOB_LEASE_TIMEOUT`` the
keeper renews all of the process's running jobs with one UPDATE (on its own database
connection) and tells each job's context whether a cancel was requested or the run was taken
away. A prefork child starts its own keeper on its first job; a thread pool shares one.
"""

import logging
import os
import threading
from typing import Protocol

from django.db import DatabaseError, connection

from jobs import conf, statements
from jobs.models import Job

logger = logging.getLogger("jobs")


class TrackedRun(Protocol):
    """What the keeper needs of a run's context (a ``jobs.task.JobContext``)."""

    job: Job
    cancel_requested: bool
    lost: bool


class LeaseKeeper:
    def __init__(self) -> None:
        self.runs: dict[int, TrackedRun] = {}  # job id -> JobContext
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
        self.thread.start()

    def track(self, ctx: TrackedRun) -> None:
        with self.lock:
            self.runs[ctx.job.pk] = ctx

    def untrack(self, ctx: TrackedRun) -> None:
        with self.lock:
            if self.runs.get(ctx.job.pk) is ctx:
                del self.runs[ctx.job.pk]

    def _loop(self) -> None:
        while True:
            self.wake.wait(conf.get().lease_timeout.total_seconds() / 3)
            self.wake.clear()
            try:
                self.renew()
            except DatabaseError as exc:
                logger.warning("job.lease_renewal_failed", extra={"error": repr(exc)})
            except Exception:  # the keeper must outlive any surprise
                logger.exception("job.lease_keeper_error")
            finally:  # a connection every few minutes is cheaper than one held idle
                connection.close()

    def renew(self) -> None:
        """Renew every tracked run's lease now; flag cancels and lost runs on their contexts."""
        with self.lock:
            runs = dict(self.runs)
        by_worker: dict[str, list[int]] = {}
        for job_id, ctx in runs.items():
            by_worker.setdefault(ctx.job.locked_by, []).append(job_id)
        for worker, job_ids in by_worker.items():
            alive = statements.renew_leases(job_ids, worker=worker)
            for job_id in job_ids:
                ctx = runs[job_id]
                if job_id not in alive:
                    ctx.lost = True
                elif alive[job_id]:
                    ctx.cancel_requested = True


_keeper: dict[str, object] = {"pid": None, "keeper": None}
_keeper_lock = threading.Lock()


def keeper() -> LeaseKeeper:
    """Return this process's keeper, starting it on first use (and again after a fork)."""
    pid = os.getpid()
    if _keeper["pid"] != pid:
        with _keeper_lock:
            if _keeper["pid"] != pid:
                _keeper["keeper"] = LeaseKeeper()
                _keeper["pid"] = pid
    return _keeper["keeper"]
