"""The ``deployments.run`` task: fetch the job's deployment id and hand it to the runner."""

from celery import shared_task

from deployments.runner import pipeline
from jobs.maintenance import runs
from jobs.task import JobContext, JobTask


# Routed to the ``deployments`` queue (project.celery task_routes; enqueue names it too).
@shared_task(
    base=JobTask, name="deployments.run", job_max_attempts=1, batch=False, stops_on_shutdown=True
)
def run_deployment(ctx: JobContext) -> dict:
    """Run the deployment named in the job's payload (at most once: one attempt)."""
    return pipeline.run(deployment_id=int(ctx.payload["deployment_id"]), ctx=ctx)


# At the end of a deployment's health window (deployments.health); judging twice is harmless.
@shared_task(base=JobTask, name="deployments.health_check", job_max_attempts=3)
def health_check(ctx: JobContext) -> dict:
    """Judge the health of the deployment named in the job's payload."""
    from deployments.health import health_evaluate

    interim = bool(ctx.payload.get("interim"))
    health = health_evaluate(int(ctx.payload["deployment_id"]), interim=interim)
    return {"status": health.get("status"), "reasons": health.get("reasons", [])}


# One job per recovery; a killed run's retry resumes after its last batch (deployments.recovery).
@shared_task(base=JobTask, name="deployments.recover", batch=False, job_max_attempts=10)
def recover(ctx: JobContext) -> dict:
    """Retry the failures that followed a deployment (see deployments.recovery)."""
    from deployments.recovery import recovery_run

    recovery = recovery_run(int(ctx.payload["recovery_id"]), keep_going=ctx.heartbeat)
    return {"done": recovery.done, "failed": recovery.failed, "status": recovery.status}


@shared_task(name="maintenance.fetch_workspaces", ignore_result=True)
def fetch_workspaces(force: bool = False) -> dict:
    """Fetch every workspace on this host (see deployments.maintenance.fetch)."""
    from deployments.maintenance.fetch import fetch_workspaces as fetch

    return runs.run_task("fetch_workspaces", fetch, force=force)


@shared_task(name="maintenance.prune_worktrees", ignore_result=True)
def prune_worktrees(force: bool = False) -> dict:
    """Warn about and remove idle worktrees (see deployments.maintenance.prune)."""
    from deployments.maintenance.prune import prune_worktrees as prune

    return runs.run_task("prune_worktrees", prune, force=force)


@shared_task(name="maintenance.purge_deployment_logs", ignore_result=True)
def purge_deployment_logs(force: bool = False) -> dict:
    """Delete logs past their retention (see deployments.maintenance.purge_logs)."""
    from deployments.maintenance.purge_logs import purge_logs

    return runs.run_task("purge_deployment_logs", purge_logs, force=force)


@shared_task(name="maintenance.expire_approvals", ignore_result=True)
def expire_approvals(force: bool = False) -> dict:
    """End deployments that waited for approval too long (deployments.maintenance.approvals)."""
    from deployments.maintenance.approvals import expire_approvals as expire

    return runs.run_task("expire_approvals", expire, force=force)
