"""Read-only views of the job engine: queue statistics for /api/v1/queue and queue_stats."""

from django.db.models import Count, Max, Min
from django.utils import timezone

from jobs.models import Job, JobStatus, MaintenanceRun
from jobs.queues import paused_names

# A runner whose last completed run is older than this many intervals is flagged.
OVERDUE_INTERVALS = 3

RECENT_LIMIT = 20


def queue_stats(*, recent: int = RECENT_LIMIT) -> dict:
    """Count jobs by status, by queue and by task; age of the oldest queued job; recent jobs."""
    now = timezone.now()
    by_status = dict.fromkeys(JobStatus.values, 0)
    for row in Job.objects.values("status").annotate(n=Count("pk")).order_by():
        by_status[row["status"]] = row["n"]
    by_queue: dict[str, dict[str, int]] = {}
    for row in Job.objects.values("queue", "status").annotate(n=Count("pk")).order_by():
        by_queue.setdefault(row["queue"], dict.fromkeys(JobStatus.values, 0))[row["status"]] = row[
            "n"
        ]
    by_task: dict[str, dict[str, int]] = {}
    for row in Job.objects.values("task", "status").annotate(n=Count("pk")).order_by():
        by_task.setdefault(row["task"], dict.fromkeys(JobStatus.values, 0))[row["status"]] = row[
            "n"
        ]
    oldest = Job.objects.filter(status=JobStatus.QUEUED, run_after__lte=now).aggregate(
        t=Min("run_after")
    )["t"]
    return {
        "paused_queues": sorted(paused_names()),
        "maintenance": maintenance_status(now=now),
        "by_status": by_status,
        "by_queue": by_queue,
        "by_task": by_task,
        "running": by_status[JobStatus.RUNNING],
        "oldest_queued_age_seconds": round((now - oldest).total_seconds(), 3) if oldest else None,
        "recent": list(
            Job.objects.order_by("-id").values(
                "id",
                "task",
                "queue",
                "status",
                "attempts",
                "max_attempts",
                "created_at",
                "started_at",
                "finished_at",
                "last_error",
            )[:recent]
        ),
    }


def maintenance_status(*, now=None) -> list[dict]:
    """Each maintenance runner's last completed run, interval, and whether it is overdue.

    ``overdue`` is true when an enabled runner has not completed a run within
    ``OVERDUE_INTERVALS`` of its intervals (or never, once scheduled that long): beat is not
    running, or the maintenance queue has no worker.
    """
    from django_celery_beat.models import PeriodicTask

    from jobs.maintenance.runs import TASK_PREFIX, configured_intervals, scheduled_intervals

    now = now or timezone.now()
    intervals = {name: (interval, True) for name, interval in configured_intervals().items()}
    intervals.update(scheduled_intervals())
    latest_ids = (
        MaintenanceRun.objects.values("runner").annotate(last=Max("pk")).values_list("last")
    )
    last_runs = {run.runner: run for run in MaintenanceRun.objects.filter(pk__in=latest_ids)}
    installed = dict(
        PeriodicTask.objects.filter(task__startswith=TASK_PREFIX).values_list(
            "task", "date_changed"
        )
    )
    status = []
    for runner in sorted({*intervals, *last_runs}):
        interval, enabled = intervals.get(runner, (None, False))
        run = last_runs.get(runner)
        since = run.finished_at if run else installed.get(TASK_PREFIX + runner)
        overdue = bool(
            enabled
            and interval is not None
            and since is not None
            and now - since > OVERDUE_INTERVALS * interval
        )
        status.append(
            {
                "runner": runner,
                "enabled": enabled,
                "interval_seconds": interval.total_seconds() if interval else None,
                "last_run_at": run.finished_at if run else None,
                "duration_ms": run.duration_ms if run else None,
                "counts": run.counts if run else None,
                "error": (run.error or None) if run else None,
                "overdue": overdue,
            }
        )
    return status
