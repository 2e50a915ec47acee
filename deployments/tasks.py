"""The ``deployments.run`` task: fetch the job's deployment id and hand it to the runner."""

from celery import shared_task

from deployments import conf
from deployments.runner import pipeline
from jobs.errors import Permanent
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
    """Start a fetch round on every live deployer host (see deployments.maintenance.hosts)."""
    from deployments.maintenance.hosts import fan_out

    return runs.run_task("fetch_workspaces", lambda: fan_out(FETCH_HOST), force=force)


@shared_task(name="maintenance.prune_worktrees", ignore_result=True)
def prune_worktrees(force: bool = False) -> dict:
    """Start a prune round on every live deployer host (see deployments.maintenance.hosts)."""
    from deployments.maintenance.hosts import fan_out

    return runs.run_task("prune_worktrees", lambda: fan_out(PRUNE_HOST), force=force)


FETCH_HOST, PRUNE_HOST = "deployments.fetch_host", "deployments.prune_host"


# Enqueued on deployments.host.<host>: only that host's deployers consume it.
@shared_task(base=JobTask, name=FETCH_HOST, job_max_attempts=1)
def fetch_host(ctx: JobContext) -> dict:
    """Fetch this host's workspaces (see deployments.maintenance.fetch)."""
    from deployments.maintenance.fetch import fetch_workspaces as fetch

    return _host_round(ctx, "fetch_workspaces", fetch)


@shared_task(base=JobTask, name=PRUNE_HOST, job_max_attempts=1)
def prune_host(ctx: JobContext) -> dict:
    """Warn about and remove this host's idle worktrees (see deployments.maintenance.prune)."""
    from deployments.maintenance.prune import prune_worktrees as prune

    return _host_round(ctx, "prune_worktrees", prune)


def _host_round(ctx: JobContext, runner: str, service) -> dict:
    host = conf.get().deployer_host
    if ctx.payload["host"] != host:  # a worker given another host's queue by hand
        raise Permanent(f"this round is for host {ctx.payload['host']!r}, not {host!r}")
    # Recorded as its own runner per host; the fan-out already keeps the pace.
    return runs.run_task(f"{runner}@{host}", service, force=True)


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


@shared_task(name="maintenance.check_unrouted", ignore_result=True)
def check_unrouted(force: bool = False) -> dict:
    """Decide runs_on deployments no live deployer can take (deployments.maintenance.unrouted)."""
    from deployments.maintenance.unrouted import check_unrouted as check

    return runs.run_task("check_unrouted", check, force=force)
