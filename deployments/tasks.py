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
