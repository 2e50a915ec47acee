"""Read-only views of the job engine: queue statistics for /api/v1/queue and queue_stats."""

from django.db.models import Count, Min
from django.utils import timezone

from jobs.models import Job, JobStatus

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
