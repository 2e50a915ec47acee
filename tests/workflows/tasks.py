"""Tasks of the workflow tests; workers load them with ``--include tests.workflows.tasks``."""

import os
import time

from celery import shared_task

from jobs import Permanent
from jobs.limits import Limit
from jobs.models import AuditLog
from jobs.task import JobContext, JobTask


def _record(ctx: JobContext, action: str, **details) -> None:
    AuditLog.objects.create(
        actor=f"pid:{os.getpid()}",
        action=action,
        target_type="job",
        target_id=str(ctx.job.pk),
        details={"attempt": ctx.job.attempts, **details},
    )


@shared_task(base=JobTask, name="tests.wf.add")
def add(ctx: JobContext):
    """Return ``n`` plus the previous step's result (0 for the first); sleep ``sleep`` first."""
    time.sleep(float(ctx.payload.get("sleep", 0)))
    _record(ctx, "wf.ran")
    return ctx.payload.get("n", 0) + (ctx.payload.get("previous") or 0)


@shared_task(base=JobTask, name="tests.wf.fail")
def fail(ctx: JobContext):
    _record(ctx, "wf.ran")
    raise Permanent(f"member {ctx.payload.get('n')} cannot work")


@shared_task(base=JobTask, name="tests.wf.collect")
def collect(ctx: JobContext):
    """A callback: record what it was given; return the members' statuses, counted."""
    members = ctx.payload.get("members", [])
    _record(ctx, "wf.callback", members=len(members))
    summary: dict = {}
    for member in members:
        summary[member["status"]] = summary.get(member["status"], 0) + 1
    return {"statuses": summary, "results": [member["result"] for member in members]}


@shared_task(base=JobTask, name="tests.wf.atomic", atomic=True)
def atomic_step(ctx: JobContext):
    """An atomic member: its record is written in the same transaction as its success."""
    time.sleep(float(ctx.payload.get("sleep", 0)))
    _record(ctx, "wf.ran")
    return ctx.payload.get("n")


@shared_task(base=JobTask, name="tests.wf.collect_atomic", atomic=True)
def collect_atomic(ctx: JobContext):
    """An atomic callback: its record and its success commit together, so it shows once."""
    return collect.run(ctx)


@shared_task(base=JobTask, name="tests.wf.rated", limit=Limit(rate="1/s"))
def rated(ctx: JobContext):
    """A step of a task that starts at most once a second."""
    return ctx.payload.get("n", 0)
