"""What the console's Tasks pages show: per task (and queue), the jobs that ended and how fast.

Sidekiq 7's metrics, read from the engine's per-minute rollup (``jobs.accounting.rollup``),
never from ``jobs_job``: executions (jobs that ended), failures (ended dead, or succeeded for
an owner that failed, as the throughput chart counts them), cancelled, the failure rate, run
time (finished − started of the last attempt) and queue wait (claimed − due) as p50/p95 and
max, over the last hour or the last 24 hours. Percentiles are estimated from the rollup's
cumulative buckets (``jobs.accounting.stats.quantile``), so they are as fine as the buckets
are; the maxima are exact. A django.tasks job counts under its function path
(``jobs.task_names``).
"""

from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from jobs.accounting import stats
from jobs.accounting.rollup import OWNER_FAILED, RUN_TIME_BOUNDS, WAIT_TIME_BOUNDS
from jobs.models import JobStatus

# Window name -> (span, chart bucket). The first is the default.
WINDOWS = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "24h": (timedelta(hours=24), timedelta(hours=1)),
}
# How many tasks the dashboard's panel names in each of its two lists.
PANEL_SIZE = 5


def window_of(name: str | None) -> str:
    """Return ``name`` if it is a window, else the default one."""
    return name if name in WINDOWS else next(iter(WINDOWS))


def duration_text(seconds: float | None) -> str:
    """A duration as an operator reads it: ``—``, ``12 ms``, ``3.40 s``, ``2.5 min``."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def breakable(name: str) -> SafeString:
    """``name`` escaped, with line breaks allowed after its dots (never inside a word)."""
    return mark_safe(escape(name).replace(".", ".<wbr>"))


def jobs_url(**filters) -> str:
    """The Jobs list filtered by ``filters`` (its task filter knows function paths)."""
    return reverse("admin:jobs_job_changelist") + "?" + urlencode(filters)


def figures(ended: stats.Ended, by_status: dict[str, int]) -> dict:
    """One row's numbers: counts, failure rate, run-time and wait-time estimates."""
    total = ended.count
    # As the throughput chart counts them: ended dead, or succeeded for an owner that failed.
    failed = by_status.get(JobStatus.DEAD, 0) + by_status.get(OWNER_FAILED, 0)
    run = [
        stats.quantile(ended.run_time_buckets, RUN_TIME_BOUNDS, q, ended.run_time_max)
        for q in (0.5, 0.95)
    ]
    wait = [
        stats.quantile(ended.wait_time_buckets, WAIT_TIME_BOUNDS, q, ended.wait_time_max)
        for q in (0.5, 0.95)
    ]
    has_runs = ended.run_time_buckets[-1] > 0
    row = {
        "executions": total,
        "succeeded": by_status.get(JobStatus.SUCCEEDED, 0),
        "failed": failed,
        "cancelled": by_status.get(JobStatus.CANCELLED, 0),
        "failure_rate": failed / total if total else None,
        "run_p50": run[0],
        "run_p95": run[1],
        "run_max": ended.run_time_max if has_runs else None,
        "wait_p50": wait[0],
        "wait_p95": wait[1],
        "wait_max": ended.wait_time_max if has_runs else None,
    }
    for key in ("run_p50", "run_p95", "run_max", "wait_p50", "wait_p95", "wait_max"):
        row[f"{key}_text"] = duration_text(row[key])
    row["failure_rate_text"] = (
        "—" if row["failure_rate"] is None else f"{row['failure_rate'] * 100:.1f}%"
    )
    return row


def _sum(rows) -> tuple[stats.Ended, dict[str, int]]:
    ended, by_status = stats.Ended(), {}
    for row in rows:
        ended.add(row)
        by_status[row.status] = by_status.get(row.status, 0) + row.count
    return ended, by_status


class _Status:
    """A summed window of one status, shaped as ``stats.Ended.add`` and ``_sum`` read it."""

    def __init__(self, status: str, ended: stats.Ended):
        self.status, self.count = status, ended.count
        for name in ("run_time_buckets", "run_time_sum", "run_time_max"):
            setattr(self, name, getattr(ended, name))
        for name in ("wait_time_buckets", "wait_time_sum", "wait_time_max"):
            setattr(self, name, getattr(ended, name))


def task_rows(
    window: str, now: datetime | None = None, *, queue: str | None = None
) -> tuple[list[dict], list[str]]:
    """Every task that had a job end in ``window`` (on ``queue`` if given): its figures and
    its pages' links; and the queues that had a job end in it."""
    now = now or timezone.now()
    since = now - WINDOWS[window][0]
    per_task: dict[str, list] = {}
    queues = set()
    for (on, task, status), ended in stats.ended_since(since).items():
        queues.add(on)
        if queue is None or on == queue:
            per_task.setdefault(task, []).append(_Status(status, ended))
    rows = []
    for task in sorted(per_task):
        ended, by_status = _sum(per_task[task])
        on = {"queue": queue} if queue else {}
        rows.append(
            {
                "task": task,
                "task_html": breakable(task),
                "url": reverse("admin:console_task", args=[task]) + f"?window={window}",
                "jobs_url": jobs_url(task=task, **on),
                "failed_url": jobs_url(task=task, status__exact=JobStatus.DEAD, **on),
                **figures(ended, by_status),
            }
        )
    return rows, sorted(queues)


def panel(now: datetime | None = None) -> dict:
    """The dashboard's panel: the busiest and the slowest (p95 run time) tasks of the hour."""
    rows, _ = task_rows("1h", now)
    busiest = sorted(rows, key=lambda r: (-r["executions"], r["task"]))[:PANEL_SIZE]
    timed = [row for row in rows if row["run_p95"] is not None]
    slowest = sorted(timed, key=lambda r: (-r["run_p95"], r["task"]))[:PANEL_SIZE]
    return {"busiest": busiest, "slowest": slowest, "tasks_url": reverse("admin:console_tasks")}


def _buckets(now: datetime, span: timedelta, step: timedelta) -> list[datetime]:
    last = now.replace(second=0, microsecond=0)
    if step >= timedelta(hours=1):
        last = last.replace(minute=0)
    count = int(span / step)
    return [last - step * i for i in range(count - 1, -1, -1)]


def _bucket_of(minute: datetime, step: timedelta) -> datetime:
    if step >= timedelta(hours=1):
        return minute.replace(minute=0, second=0, microsecond=0)
    return minute.replace(second=0, microsecond=0)


def task_detail(task: str, window: str, now: datetime | None = None) -> dict:
    """One task's figures over ``window``, per queue, and per chart bucket."""
    now = now or timezone.now()
    span, step = WINDOWS[window]
    buckets = _buckets(now, span, step)
    rows = stats.ended_of_task(task, min(now - span, buckets[0]))
    in_window = [row for row in rows if row.minute >= (now - span).replace(second=0, microsecond=0)]
    per_queue: dict[str, list] = {}
    for row in in_window:
        per_queue.setdefault(row.queue, []).append(row)
    queues = [
        {
            "queue": queue,
            "jobs_url": jobs_url(task=task, queue=queue),
            **figures(*_sum(per_queue[queue])),
        }
        for queue in sorted(per_queue)
    ]
    per_bucket: dict[datetime, list] = {}
    for row in rows:
        per_bucket.setdefault(_bucket_of(row.minute, step), []).append(row)
    points = []
    for at in buckets:
        point = figures(*_sum(per_bucket.get(at, [])))
        points.append({"at": at, **point})
    return {
        "task": task,
        "window": window,
        "step_seconds": int(step.total_seconds()),
        "total": figures(*_sum(in_window)),
        "queues": queues,
        "points": points,
        "jobs_url": jobs_url(task=task),
        "failed_url": jobs_url(task=task, status__exact=JobStatus.DEAD),
        "recent_url": jobs_url(task=task, finished_at__gte=f"{now - span:%Y-%m-%d %H:%M:%S}"),
    }
