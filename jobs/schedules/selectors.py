"""Reads for the schedules page and /metrics."""

from datetime import datetime

from django.db.models import Max

from jobs.models import JobStatus, Schedule, ScheduleRun

RECENT_RUNS = 5


def recent_runs(schedule: Schedule, count: int = RECENT_RUNS) -> list[ScheduleRun]:
    """The schedule's newest runs (slot or by hand) with their jobs, newest first."""
    return list(
        ScheduleRun.objects.filter(schedule=schedule)
        .select_related("job")
        .order_by("-slot", "-id")[:count]
    )


def last_successes() -> dict[str, datetime | None]:
    """Each schedule's latest successful run's end (None: none among the runs kept).

    One grouped read over the runs kept (at most ``fire.RUNS_KEPT`` per schedule).
    """
    found = dict(
        ScheduleRun.objects.filter(job__status=JobStatus.SUCCEEDED)
        .values_list("schedule__name")
        .annotate(last=Max("job__finished_at"))
        .order_by()
    )
    return {
        name: found.get(name) for name in Schedule.objects.order_by().values_list("name", flat=True)
    }


def created_at() -> dict[str, datetime]:
    return dict(Schedule.objects.order_by().values_list("name", "created_at"))
