"""Exceptions a job body raises to steer the engine, and the engine's own errors."""


class Permanent(Exception):  # noqa: N818 - the name reads as the decision it carries
    """Raise from a job body to fail it for good: no retry, straight to ``dead``."""


# The longest a job may be put off by Snooze or RetryAfter (a longer or non-finite value is cut).
MAX_DELAY_SECONDS = 366 * 24 * 3600.0


def _delay(seconds) -> float:
    seconds = float(seconds)
    if seconds != seconds:  # NaN
        return 0.0
    return min(max(0.0, seconds), MAX_DELAY_SECONDS)


class Snooze(Exception):  # noqa: N818
    """Raise from a job body to run it again in ``seconds`` without using an attempt."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        super().__init__(reason or f"snoozed for {seconds}s")
        self.seconds = _delay(seconds)


class WorkerShutdown(BaseException):  # noqa: N818 - like KeyboardInterrupt: not an Exception
    """Raised in a job body when its worker shuts down past the grace period (jobs.shutdown)."""


class IllegalTransition(Exception):
    """A state change that the TRANSITIONS table does not allow was requested."""


class JobNotFound(Exception):
    """No job has the given id."""


class RetryAfter(Exception):  # noqa: N818
    """Raise (or subclass) from a job body to retry after ``seconds`` (it spends an attempt).

    With ``seconds=None`` the task's backoff applies, as for any retryable error; a receiver's
    ``Retry-After`` header is the usual source of ``seconds``.
    """

    def __init__(self, message: str = "", *, seconds: float | None = None) -> None:
        super().__init__(message)
        self.seconds = None if seconds is None else _delay(seconds)
