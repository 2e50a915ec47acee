"""Per-minute figures of the jobs that ended: throughput, failures, run-time and wait-time.

``refresh()`` (the ``account_jobs`` maintenance runner, every few seconds) recomputes the
``JobMinuteStats`` rows of the last ``REFRESH_MINUTES`` minutes from the jobs whose
``finished_at`` falls in them, so it is idempotent and picks up a job whose end committed a
little late. It reads a ``finished_at`` range per finished status (the ``job_purge_idx``
index on ``(status, finished_at)``), so its cost follows the recent throughput, not the size
of the table. Rows older than ``RETENTION`` are deleted.

These are estimates: a job whose end commits more than ``REFRESH_MINUTES`` after its
``finished_at`` is missed, a job purged is not taken back, and the run time is that of the
last attempt (``finished_at - started_at``); the wait time is claim minus due
(``started_at - run_after``) of the last attempt.

A job that succeeded while its owner failed (a deployment's job succeeds even when the
deployment fails: ``jobs.owners``' ``failed_job_ids`` hook) is rolled up with the status
``OWNER_FAILED`` rather than ``succeeded``, so the throughput chart counts it as a failure.

Buckets are cumulative, as Prometheus histograms are: ``run_time_buckets[i]`` counts the jobs
whose run time was at most ``RUN_TIME_BOUNDS[i]`` seconds, and the last entry counts every
job with a run time (cancelled-before-running jobs have none). The same for wait time.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import (
    BooleanField,
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Max,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.functions import TruncMinute
from django.utils import timezone

from jobs import owners
from jobs.models import FINISHED, Job, JobMinuteStats, JobStatus

# Upper bounds in seconds (from 5 ms to an hour), the same for run and wait time.
RUN_TIME_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
WAIT_TIME_BOUNDS = RUN_TIME_BOUNDS
# Minutes recomputed on each refresh: the current one and the two before it.
REFRESH_MINUTES = 3
# The dashboard charts 24 hours; a day more leaves room to look back.
RETENTION = timedelta(hours=48)
# The rollup's status for a job that succeeded while its owner failed.
OWNER_FAILED = "owner_failed"


@dataclass(frozen=True)
class RefreshResult:
    minutes: int
    rows: int
    expired: int


def _duration(later: str, earlier: str) -> ExpressionWrapper:
    return ExpressionWrapper(F(later) - F(earlier), output_field=DurationField())


def _aggregates() -> dict:
    aggregates = {
        "count": Count("pk"),
        "run_sum": Sum("run_time"),
        "run_max": Max("run_time"),
        "wait_sum": Sum("wait_time"),
        "wait_max": Max("wait_time"),
        "run_all": Count("pk", filter=Q(started_at__isnull=False)),
        "wait_all": Count("pk", filter=Q(started_at__isnull=False)),
    }
    for i, bound in enumerate(RUN_TIME_BOUNDS):
        aggregates[f"run_{i}"] = Count("pk", filter=Q(run_time__lte=timedelta(seconds=bound)))
    for i, bound in enumerate(WAIT_TIME_BOUNDS):
        aggregates[f"wait_{i}"] = Count("pk", filter=Q(wait_time__lte=timedelta(seconds=bound)))
    return aggregates


def _seconds(value: timedelta | None) -> float:
    return max(value.total_seconds(), 0.0) if value is not None else 0.0


def refresh(*, now: datetime | None = None) -> RefreshResult:
    """Recompute the last ``REFRESH_MINUTES`` minutes of ``JobMinuteStats``; drop expired ones."""
    now = now or timezone.now()
    first = now.replace(second=0, microsecond=0) - timedelta(minutes=REFRESH_MINUTES - 1)
    rows = (
        Job.objects.filter(status__in=FINISHED, finished_at__gte=first)
        .annotate(
            run_time=_duration("finished_at", "started_at"),
            wait_time=_duration("started_at", "run_after"),
            owner_failed=Case(
                When(Q(status=JobStatus.SUCCEEDED) & owners.failed_owner_filter(), then=True),
                default=Value(False),
                output_field=BooleanField(),
            ),
        )
        .values("queue", "task", "status", "owner_failed", minute=TruncMinute("finished_at"))
        .annotate(**_aggregates())
        .order_by()
    )
    fresh = [
        JobMinuteStats(
            minute=row["minute"],
            queue=row["queue"],
            task=row["task"],
            status=OWNER_FAILED if row["owner_failed"] else row["status"],
            count=row["count"],
            run_time_buckets=[row[f"run_{i}"] for i in range(len(RUN_TIME_BOUNDS))]
            + [row["run_all"]],
            run_time_sum=_seconds(row["run_sum"]),
            run_time_max=_seconds(row["run_max"]),
            wait_time_buckets=[row[f"wait_{i}"] for i in range(len(WAIT_TIME_BOUNDS))]
            + [row["wait_all"]],
            wait_time_sum=_seconds(row["wait_sum"]),
            wait_time_max=_seconds(row["wait_max"]),
        )
        for row in rows
    ]
    with transaction.atomic():
        JobMinuteStats.objects.filter(minute__gte=first).delete()
        JobMinuteStats.objects.bulk_create(fresh)
        expired, _ = JobMinuteStats.objects.filter(minute__lt=now - RETENTION).delete()
    return RefreshResult(minutes=REFRESH_MINUTES, rows=len(fresh), expired=expired)
