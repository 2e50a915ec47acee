"""Celery tasks of the job engine: the built-in no-op job and the maintenance entry points."""

import time

from celery import shared_task

from jobs import bulk
from jobs.maintenance import runs
from jobs.maintenance.accounting import account
from jobs.maintenance.purge import purge
from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep
from jobs.models import Job
from jobs.task import JobContext, JobTask


@shared_task(base=JobTask, name="jobs.noop")
def noop(ctx: JobContext):
    """Do nothing, after sleeping ``payload["sleep"]`` seconds: for smoke checks and benchmarks."""
    seconds = float(ctx.payload.get("sleep", 0) or 0)
    if seconds:
        time.sleep(seconds)
    return None


# One job per bulk operation; a killed run's retry resumes after its last batch (jobs.bulk).
@shared_task(base=JobTask, name=bulk.BULK_TASK, batch=False, job_max_attempts=10)
def bulk_operate(ctx: JobContext):
    """Retry, cancel or delete the jobs matching an operator's filter (see jobs.bulk)."""
    operation = bulk.bulk_run(ctx.payload["operation_id"], keep_going=ctx.heartbeat)
    return {"done": operation.done, "failed": operation.failed, "status": operation.status}


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


@shared_task(name="maintenance.account_jobs", ignore_result=True)
def account_jobs(force: bool = False) -> dict:
    """Fold job count deltas and refresh the per-minute rollup (see jobs.maintenance.accounting)."""
    return runs.run_task("account_jobs", account, force=force)


@shared_task(name="maintenance.fire_schedules", ignore_result=True)
def fire_schedules(force: bool = False) -> dict:
    """Enqueue one job per due slot of every schedule (see jobs.schedules.fire)."""
    from jobs.schedules.fire import fire_due

    return runs.run_task("fire_schedules", fire_due, force=force)


class DjangoTask(JobTask):
    """Runs ``django.tasks`` functions; sends Django's task signals around each attempt."""

    job_max_attempts = 1  # the backend passes its own max_attempts with every job

    def run_ended(self, job: Job) -> None:
        from django.tasks.signals import task_finished

        fresh = Job.objects.filter(pk=job.pk).first()
        if fresh is not None:
            task_finished.send(type(backend_of(fresh)), task_result=result_of(fresh))


def backend_of(job: Job):
    from django.tasks import task_backends

    return task_backends[job.payload.get("backend", "default")]


def result_of(job: Job, **kwargs):
    return backend_of(job).result(job, **kwargs)


@shared_task(base=DjangoTask, name="jobs.django_task")
def django_task(ctx: JobContext):
    """Run a ``django.tasks`` function enqueued through ``jobs.backends.ConveyorBackend``."""
    from django.tasks.base import TaskContext
    from django.tasks.signals import task_started
    from django.utils.json import normalize_json

    backend_of(ctx.job).task_of(ctx.job)  # NotATask: dead at once, saying what the path is
    result = result_of(ctx.job)
    task_started.send(type(backend_of(ctx.job)), task_result=result)
    args, kwargs = ctx.payload.get("args", []), ctx.payload.get("kwargs", {})
    if result.task.takes_context:
        return normalize_json(result.task.call(TaskContext(task_result=result), *args, **kwargs))
    return normalize_json(result.task.call(*args, **kwargs))
