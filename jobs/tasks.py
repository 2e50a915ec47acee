"""Celery tasks of the job engine: the built-in no-op job and the maintenance entry points."""

import time

from celery import shared_task

from jobs.maintenance import runs
from jobs.maintenance.purge import purge
from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep
from jobs.task import JobContext, JobTask


@shared_task(base=JobTask, name="jobs.noop")
def noop(ctx: JobContext):
    """Do nothing, after sleeping ``payload["sleep"]`` seconds: for smoke checks and benchmarks."""
    seconds = float(ctx.payload.get("sleep", 0) or 0)
    if seconds:
        time.sleep(seconds)
    return None


# Every maintenance task runs its service through jobs.maintenance.runs: one run at a time
# across all beats and workers, at most one per half interval, each recorded.
@shared_task(name="maintenance.reap_jobs", ignore_result=True)
def reap_jobs(force: bool = False) -> dict:
    """Recover running jobs whose lease expired (see jobs.maintenance.reaper)."""
    return runs.run_task("reap_jobs", reap, force=force)


@shared_task(name="maintenance.sweep_jobs", ignore_result=True)
def sweep_jobs(force: bool = False) -> dict:
    """Re-publish due jobs no worker claimed (see jobs.maintenance.sweeper)."""
    return runs.run_task("sweep_jobs", sweep, force=force)


@shared_task(name="maintenance.purge_jobs", ignore_result=True)
def purge_jobs(force: bool = False) -> dict:
    """Delete finished jobs past their retention (see jobs.maintenance.purge)."""
    return runs.run_task("purge_jobs", purge, force=force)


@shared_task(base=JobTask, name="jobs.django_task")
def django_task(ctx: JobContext):
    """Run a ``django.tasks`` function enqueued through ``jobs.backends.ConveyorBackend``."""
    from django.tasks.base import TaskContext
    from django.utils.json import normalize_json
    from django.utils.module_loading import import_string

    task = import_string(ctx.payload["path"])
    args, kwargs = ctx.payload.get("args", []), ctx.payload.get("kwargs", {})
    if task.takes_context:
        from jobs.backends import ConveyorBackend  # noqa: F401 - the backend serves get_result

        result = task.get_backend().get_result(ctx.job.pk)
        return normalize_json(task.call(TaskContext(task_result=result), *args, **kwargs))
    return normalize_json(task.call(*args, **kwargs))
