"""The name a job is shown, filtered and counted by: its task, or a django.tasks job's function.

Every ``django.tasks`` job is stored with the Celery task that runs it, ``jobs.django_task``
(``jobs.backends``), and names its function in its payload (``"path"``). The row keeps that
task, so claiming, retries, limits, uniqueness and the sweeper treat it as before; the console,
the per-minute rollup and ``/metrics`` use the *display name* instead: the function path
(``myapp.tasks.send_report``) for a django.tasks job, the task for any other.

The live counts by status (``jobs.accounting.counts``, kept by the triggers of
``jobs.accounting.triggers``) and what ended (the rollup) are both per function path.
"""

from django.db import connection
from django.db.models import Case, CharField, F, Q, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from jobs import payload_search

DJANGO_TASK = "jobs.django_task"


def display_name(task: str, payload) -> str:
    """Return the name ``task`` with ``payload`` is shown by (see the module doc)."""
    if task == DJANGO_TASK and isinstance(payload, dict):
        path = payload.get("path")
        if isinstance(path, str) and path:
            return path
    return task


def display_expression() -> Case:
    """The display name as a database expression over ``jobs_job`` (for GROUP BY)."""
    return Case(
        When(task=DJANGO_TASK, then=Coalesce(KT("payload__path"), Value(DJANGO_TASK))),
        default=F("task"),
        output_field=CharField(),
    )


def registered_job_tasks() -> set[str]:
    """Return the names of the Celery tasks that run jobs (JobTask subclasses)."""
    from jobs.task import JobTask
    from project.celery import app

    return {name for name, task in app.tasks.items() if isinstance(task, JobTask)}


def matching(name: str, *, function_path: bool) -> Q:
    """The jobs shown under ``name``: a function's django.tasks jobs, or a task's jobs.

    On PostgreSQL a function's jobs are found with ``payload @> {"path": name}``, which the
    payload's GIN index answers (jobs.payload_search); elsewhere by the payload's ``path`` key.
    """
    if not function_path:
        return Q(task=name)
    if connection.vendor == "postgresql":
        return Q(task=DJANGO_TASK) & payload_search.contains({"path": name})
    return Q(task=DJANGO_TASK, payload__path=name)


def filter_by_name(name: str) -> Q:
    """The jobs shown under ``name``: a job task's jobs (registered, or any task a job is
    stored with: one index lookup says), else that django.tasks function's jobs.

    Never both in one OR, which no index answers in the list's order.
    """
    from jobs.models import Job

    if name == DJANGO_TASK or name in registered_job_tasks():
        return Q(task=name)
    stored = Job.objects.filter(task=name).order_by().exists()
    return matching(name, function_path=not stored)
