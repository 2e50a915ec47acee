"""Exceptions a job body raises to steer the engine, and the engine's own errors."""


class Permanent(Exception):  # noqa: N818 - the name reads as the decision it carries
    """Raise from a job body to fail it for good: no retry, straight to ``dead``."""


class Snooze(Exception):  # noqa: N818
    """Raise from a job body to run it again in ``seconds`` without using an attempt."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        super().__init__(reason or f"snoozed for {seconds}s")
        self.seconds = max(0.0, float(seconds))


class IllegalTransition(Exception):
    """A state change that the TRANSITIONS table does not allow was requested."""


class JobNotFound(Exception):
    """No job has the given id."""
