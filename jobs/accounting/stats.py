"""Reads of the per-minute rollup (``JobMinuteStats``): estimates of what ended, and how fast.

A window's figures sum its minute rows; a read never touches ``jobs_job``. See
``jobs.accounting.rollup`` for how the rows are made and why they are estimates.
"""

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import F, Sum
from django.db.models.functions import TruncHour

from jobs.accounting.rollup import RUN_TIME_BOUNDS, WAIT_TIME_BOUNDS
from jobs.models import JobMinuteStats


@dataclass
class Ended:
    """Jobs of one queue, task and status that ended in a window, with their time buckets."""

    count: int = 0
    run_time_buckets: list[int] = field(default_factory=lambda: [0] * (len(RUN_TIME_BOUNDS) + 1))
    run_time_sum: float = 0.0
    wait_time_buckets: list[int] = field(default_factory=lambda: [0] * (len(WAIT_TIME_BOUNDS) + 1))
    wait_time_sum: float = 0.0
    run_time_max: float = 0.0
    wait_time_max: float = 0.0

    def add(self, row: "JobMinuteStats | Ended") -> None:
        """Add a minute row's (or another window's) figures to these."""
        self.count += row.count
        self.run_time_sum += row.run_time_sum
        self.wait_time_sum += row.wait_time_sum
        self.run_time_max = max(self.run_time_max, row.run_time_max)
        self.wait_time_max = max(self.wait_time_max, row.wait_time_max)
        for i, n in enumerate(row.run_time_buckets[: len(self.run_time_buckets)]):
            self.run_time_buckets[i] += n
        for i, n in enumerate(row.wait_time_buckets[: len(self.wait_time_buckets)]):
            self.wait_time_buckets[i] += n


def ended_since(since: datetime) -> dict[tuple[str, str, str], Ended]:
    """Return ``{(queue, task, status): Ended}`` for the minutes from ``since``'s on."""
    first = since.replace(second=0, microsecond=0)
    summed: dict[tuple[str, str, str], Ended] = {}
    for row in JobMinuteStats.objects.filter(minute__gte=first).iterator(chunk_size=2000):
        summed.setdefault((row.queue, row.task, row.status), Ended()).add(row)
    return summed


def ended_per_queue_and_task(
    ended: dict[tuple[str, str, str], Ended],
) -> dict[tuple[str, str], Ended]:
    """Sum ``ended`` over the statuses: ``{(queue, task): Ended}``."""
    summed: dict[tuple[str, str], Ended] = {}
    for (queue, task, _), figures in ended.items():
        summed.setdefault((queue, task), Ended()).add(figures)
    return summed


def ended_per_bucket(first: datetime, *, hourly: bool) -> dict[tuple[datetime, str], int]:
    """Return ``{(bucket start, status): jobs}`` for minutes from ``first`` on, summed per
    minute or (``hourly``) per hour, in the database."""
    bucket = TruncHour("minute") if hourly else F("minute")
    rows = (
        JobMinuteStats.objects.filter(minute__gte=first)
        .annotate(bucket=bucket)
        .values_list("bucket", "status")
        .annotate(n=Sum("count"))
        .order_by()
    )
    return {(at, status): n for at, status, n in rows}


def ended_of_task(task: str, since: datetime) -> list[JobMinuteStats]:
    """Return the minute rows of ``task`` (a display name) from ``since``'s minute on."""
    first = since.replace(second=0, microsecond=0)
    return list(JobMinuteStats.objects.filter(task=task, minute__gte=first).order_by("minute"))


def quantile(buckets: list[int], bounds: tuple[float, ...], q: float, most: float) -> float | None:
    """Estimate the ``q`` quantile from cumulative ``buckets`` (None when they count nothing).

    As Prometheus's ``histogram_quantile``: find the bucket the rank falls in and interpolate
    linearly inside it; a rank beyond the last bound answers the largest value seen (``most``),
    and no estimate exceeds it.
    """
    total = buckets[-1] if buckets else 0
    if total <= 0:
        return None
    rank = q * total
    below, lower = 0, 0.0
    for count, upper in zip(buckets, bounds, strict=False):
        if count >= rank and count > below:
            estimate = lower + (upper - lower) * (rank - below) / (count - below)
            return min(estimate, most)
        below, lower = count, upper
    return most
