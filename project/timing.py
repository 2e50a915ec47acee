"""How long something took, computed one way everywhere (a deployment, a step, a timeline)."""

from datetime import datetime


def seconds_between(start: datetime | None, end: datetime | None, *, digits: int = 3):
    """Seconds from ``start`` to ``end``, rounded to ``digits``; None unless both are known."""
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), digits)
