"""Read-only views of the job engine: one job by id, and queue statistics for /api/v1/queue
and queue_stats."""

from django.utils import timezone

from jobs import task_states
from jobs.accounting import counts, queues
from jobs.errors import JobNotFound
from jobs.models import Job, JobStatus, MaintenanceRun
from jobs.queues import paused_names

# A runner whose last completed run is older than this many intervals is flagged.
OVERDUE_INTERVALS = 3

RECENT_LIMIT = 20


def job(job_id: int) -> Job:
    """Job ``job_id``; JobNotFound (404 in the API) if there is none."""
    found = Job.objects.filter(pk=job_id).first()
    if found is None:
        raise JobNotFound(f"job {job_id} does not exist")
    return found


def queue_stats(*, recent: int = RECENT_LIMIT) -> dict:
    """Count jobs by status, by queue and by task; age of the oldest queued job; recent jobs.

    The counts come from the engine's accounting (exact, a few small rows); the oldest age
    from one index lookup per queue; ``recent`` from the newest ids.
    """
    now = timezone.now()
    found = counts.read()
    statuses = JobStatus.values
    by_queue = {
        name: {**dict.fromkeys(statuses, 0), **per}
        for name, per in sorted(counts.by(found, "queue").items())
    }
    by_task = {
        name: {**dict.fromkeys(statuses, 0), **per}
        for name, per in sorted(counts.by(found, "task").items())
    }
    by_status = counts.by_status(found, statuses)
    oldest = min(queues.oldest_queued(queues.queue_names(found), now=now).values(), default=None)
    return {
        "paused_queues": sorted(paused_names()),
        "paused_tasks": sorted(task_states.paused_names()),
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
    # One lookup per runner on (runner, finished_at), not a GROUP BY over every record kept.
    last_runs = {}
    for runner in intervals:
        run = MaintenanceRun.objects.filter(runner=runner).order_by("-finished_at", "-id").first()
        if run is not None:
            last_runs[runner] = run
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
