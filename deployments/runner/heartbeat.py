"""The runner's heartbeat: keep the job's lease alive and notice a cancel or a lost run."""

import logging
import time

from django.db import DatabaseError, close_old_connections

from deployments.conf import HEARTBEAT_SECONDS
from deployments.runner.step import Stop
from jobs import shutdown
from jobs.task import JobContext

logger = logging.getLogger("deployments")


class Beat:
    """Call ``ctx.heartbeat()`` at most every ``HEARTBEAT_SECONDS``; remember the verdict.

    ``tick()`` returns None while the run may go on, ``Stop.CANCELLED`` once a cancel was
    requested for the job, ``Stop.LOST`` once the run was taken away (lease expired and the
    job reaped), ``Stop.SHUTDOWN`` once the worker is shutting down past its grace. A
    database error is logged and retried on the next beat: a short outage must not fail a
    deployment whose lease is still good.
    """

    def __init__(self, ctx: JobContext, *, interval: float = HEARTBEAT_SECONDS) -> None:
        self.ctx = ctx
        self.interval = interval
        self.verdict: Stop | None = None
        self._next = 0.0

    def tick(self, *, force: bool = False) -> Stop | None:
        """Beat if the interval has passed (or ``force``); return the verdict so far."""
        if self.verdict is None and shutdown.requested():
            self.verdict = Stop.SHUTDOWN
        now = time.monotonic()
        if self.verdict is not None or (not force and now < self._next):
            return self.verdict
        self._next = now + self.interval
        try:
            alive = self.ctx.heartbeat()
        except DatabaseError as exc:
            logger.warning(
                "deployment.heartbeat_failed", extra={"job_id": self.ctx.job.pk, "error": repr(exc)}
            )
            close_old_connections()
            return None
        if not alive:
            self.verdict = Stop.LOST
        elif self.ctx.cancel_requested:
            self.verdict = Stop.CANCELLED
        return self.verdict
