"""Tasks as operators see them: pause and resume one task, and its limits in use.

A task's state is a ``TaskState`` row, read by every claim of the task (jobs.statements
under FOR KEY SHARE; jobs.limiter locks it outright):

* ``pause(name)`` stops every claim of the task's jobs, in every queue: once it returns, no
  job of the task starts anywhere; runs already under way finish.
* ``resume(name)`` clears it and, once that commits, rings for the task's due jobs.

Both are recorded in the AuditLog (``task.pause`` / ``task.resume``).
"""

from django.utils import timezone

from jobs import limits
from jobs.models import PENDING, Job, JobStatus, LimitKeyState, TaskState
from jobs.pausing import set_paused
from jobs.publish import publish
from jobs.task_names import DJANGO_TASK

# The busiest keys a task's description lists.
BUSIEST_KEYS = 5


class UnknownTask(LookupError):
    """No job task of that name is registered."""


def registered() -> dict:
    """Return ``{name: task}`` of every registered job task, by name."""
    from jobs.task import JobTask
    from project.celery import app

    return {
        name: task
        for name, task in sorted(app.tasks.items())
        if isinstance(task, JobTask) and not name.startswith("celery.")
    }


def ensure_states(names=None) -> None:
    """Create the state rows of ``names`` (default: every job task) that are missing."""
    now = timezone.now()
    rows = [TaskState(name=name, updated_at=now) for name in (names or registered())]
    TaskState.objects.bulk_create(rows, ignore_conflicts=True)


def pause(name: str, *, actor: str) -> dict:
    """Pause task ``name``: once this returns, none of its jobs starts; return its state."""
    return _set_paused(name, paused=True, actor=actor)


def resume(name: str, *, actor: str) -> dict:
    """Resume task ``name`` and ring for its due jobs once that commits; return its state."""
    return _set_paused(name, paused=False, actor=actor)


def _set_paused(name: str, *, paused: bool, actor: str) -> dict:
    if name not in registered():
        raise UnknownTask(f"no job task named {name!r} is registered")
    set_paused(TaskState, name, kind="task", paused=paused, actor=actor, ring=ring)
    return describe([name], busiest_keys=True)[0]


def ring(name: str) -> int:
    """Publish doorbells for task ``name``'s due jobs, in every queue."""
    due = Job.objects.filter(task=name, status__in=PENDING, run_after__lte=timezone.now())
    jobs = due.only("id", "task", "queue", "run_after").order_by("-priority", "run_after", "id")
    return publish(list(jobs))


def paused_names() -> set[str]:
    """Return the names of the paused tasks."""
    paused = TaskState.objects.filter(paused_at__isnull=False).order_by()
    return set(paused.values_list("name", flat=True))


def describe(names=None, *, busiest_keys: bool = False) -> list[dict]:
    """Return each task (default: the limited and the paused ones) as the tasks API shows it.

    ``running`` is exact, from the engine's accounting (jobs.accounting). ``busiest_keys``
    asks for the keys with the most running jobs of a keyed task: one grouped read of its
    running rows (the partial index of running rows; as many as there are worker slots).
    """
    from jobs.accounting import counts

    tasks = registered()
    if names is None:
        names = [n for n, t in tasks.items() if limits.limit_of(t)] + sorted(paused_names())
    names = list(dict.fromkeys(names))
    states = {state.name: state for state in TaskState.objects.filter(name__in=names)}
    running = counts.by(counts.read(), "task")
    now = timezone.now()
    found = []
    for name in names:
        state = states.get(name)
        limit = limits.limit_of(tasks.get(name))
        entry = {
            "name": name,
            "paused": bool(state and state.paused_at),
            "paused_at": state.paused_at if state else None,
            "paused_by": state.paused_by if state and state.paused_at else "",
            "limit": limit.describe() if limit else None,
            "running": running.get(name, {}).get(JobStatus.RUNNING, 0),
            "rate_full_until": _future(state.full_until if state else None, now),
            "busiest_keys": [],
            "keys_rate_held": 0,
        }
        if limit is not None and limit.keyed:
            if busiest_keys:
                entry["busiest_keys"] = _busiest_keys(name)
            if limit.key_rate:
                held = LimitKeyState.objects.filter(task=name, full_until__gt=now)
                entry["keys_rate_held"] = held.count()
        if name == DJANGO_TASK:  # the accounting counts these jobs under their functions
            entry["running"] = Job.objects.filter(task=name, status=JobStatus.RUNNING).count()
        found.append(entry)
    return found


def _future(when, now):
    return when if when is not None and when > now else None


def _busiest_keys(name: str) -> list[dict]:
    from django.db.models import Count

    running = Job.objects.filter(task=name, status=JobStatus.RUNNING).order_by()
    rows = (
        running.values("limit_key")
        .annotate(running=Count("id"))
        .order_by("-running", "limit_key")[:BUSIEST_KEYS]
    )
    return [{"key": row["limit_key"], "running": row["running"]} for row in rows]
