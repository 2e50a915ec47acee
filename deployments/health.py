"""The health gate: after a deployment succeeds, watch its environment and judge it.

An environment's ``health`` rules (``Environment.health``, from projects-as-code
``environments: [{health: {...}}]`` or the admin)::

    health:
      window: 10m             # watched after each success; also the baseline before it
      max_failure_rate: 0.2   # failed / all events in the window above this is a breach...
      min_events: 5           # ...once at least this many events happened in the window
      check: "./healthcheck"  # optional command (exit 0 = healthy), run at the window's end
      check_timeout: 30s      # default 30s
      rollback: true          # roll back to the last healthy deployment on a breach
      interval: 2m            # optional: also judge every 2m during the window; a breach
                              # found early ends the watch at once (healthy only at the end)

``health_watch`` (called by deployments.lifecycle.finish on a success, in its transaction)
stamps the deployment ``health = {"status": "watching", "rules", "until"}`` and enqueues one
``deployments.health_check`` job to run at the window's end: no loop polls. The job runs
``health_evaluate``: it measures the window after the finish and the same window before it
(``health_figures``), runs the check, and records ``healthy`` or ``unhealthy`` with those
figures, once (a guarded UPDATE from ``watching``).

**What counts.** Jobs carry no project, so a job counts for a project when its payload names
the project under ``"project"`` (its slug) — the convention a project's own jobs follow;
every *attempt* is an event, every failed attempt a failure (a retry, a dead letter). A
webhook delivery counts when its event's data names the project (every ``deployment.*``
event does); every HTTP attempt is an event, and one that was not delivered (a receiver
5xx, a timeout, a refusal) a failure. Jobs of deployments themselves and of the gate do not
name a project and are never counted.

**A breach** is: at least ``min_events`` events after the finish, a failure rate above
``max_failure_rate`` *and* above the rate of the window before the deploy (a deployment is
not blamed for a failure rate it inherited) — or the check failing. On a breach the
deployment's health becomes ``unhealthy`` with the figures, ``deployment.unhealthy`` is
announced and audited, a ``DeploymentEvent`` puts it on the timeline, and with
``rollback: true`` a rollback starts through deployments.rollback (so freezes, approvals and
deploy locks apply; if one refuses, the refusal is recorded beside the figures). A rollback
happens only while the unhealthy deployment is still the environment's current one.
"""

import logging
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

from django.db import transaction
from django.db.models import Count, JSONField, Q, Sum
from django.db.models.functions import Cast
from django.utils import timezone

from deployments.environments import rules_of
from deployments.errors import DeploymentError
from deployments.events import emit_unhealthy, log_deployment
from deployments.health_rules import stored_rules
from deployments.models import Deployment, DeploymentEvent
from deployments.models.deployments import HEALTH_HEALTHY, HEALTH_UNHEALTHY, HEALTH_WATCHING
from deployments.runner.masking import SecretMasker, project_secrets
from deployments.runner.process_env import step_process_env
from jobs import services as jobs
from jobs.models import AuditLog, Job, JobStatus
from webhooks.models import AttemptOutcome, DeliveryAttempt, Event

logger = logging.getLogger("deployments")

HEALTH_TASK = "deployments.health_check"
# On a deployer (the check runs in the deployment's directory, which is on its host).
HEALTH_QUEUE = "deployments"
DEFAULT_CHECK_TIMEOUT = 30
MAX_CHECK_OUTPUT = 2000
# A delivery's attempts span at most hours (CONVEYOR_WEBHOOK_MAX_ATTEMPTS with the backoff
# cap), so the events whose attempts fall in a window were created at most this long before it.
EVENT_LOOKBACK = timedelta(days=1)


def health_watch(deployment: Deployment) -> None:
    """Start watching a deployment that just succeeded, if its environment has a gate."""
    rules = stored_rules(rules_of(deployment.project, deployment.environment).health)
    if not rules:
        return
    until = deployment.finished_at + timedelta(seconds=rules["window"])
    job = jobs.enqueue(
        HEALTH_TASK, {"deployment_id": deployment.pk}, queue=HEALTH_QUEUE, run_after=until
    )
    interval = rules.get("interval")
    if interval:
        at = deployment.finished_at + timedelta(seconds=interval)
        while at < until:
            jobs.enqueue(
                HEALTH_TASK,
                {"deployment_id": deployment.pk, "interim": True},
                queue=HEALTH_QUEUE,
                run_after=at,
            )
            at += timedelta(seconds=interval)
    deployment.health = {
        "status": HEALTH_WATCHING,
        "rules": rules,
        "until": until.isoformat(),
        "job_id": job.pk,
    }
    Deployment.objects.filter(pk=deployment.pk).update(health=deployment.health)
    log_deployment("deployment.health_watching", deployment, until=until.isoformat())


def project_events_since(slug: str, since: datetime):
    """The webhook events whose data names the project (created from a day before ``since``)."""
    return (
        Event.objects.filter(created_at__gte=since - EVENT_LOOKBACK)
        .annotate(document=Cast("body", JSONField()))
        .filter(document__data__project=slug)
        .values("pk")
    )


def project_jobs(slug: str):
    """The jobs that count for a project: those whose payload names it under ``project``."""
    return Job.objects.filter(payload__project=slug)


def health_figures(slug: str, since: datetime, until: datetime) -> dict:
    """Measure a project's jobs and webhook deliveries over ``[since, until)``.

    Run twice per watched deployment by its one job, never on a request path: the jobs are
    found through ``job_purge_idx`` (status, finished_at) and then filtered by payload, the
    attempts by their delivery's event (events of the day before ``since``, read as JSON).
    """
    ended = project_jobs(slug).filter(
        finished_at__gte=since,
        finished_at__lt=until,
        status__in=[JobStatus.SUCCEEDED, JobStatus.DEAD],
    )
    totals = ended.aggregate(
        attempts=Sum("attempts", default=0),
        succeeded=Count("pk", filter=Q(status=JobStatus.SUCCEEDED)),
        dead=Count("pk", filter=Q(status=JobStatus.DEAD)),
    )
    retrying = (
        project_jobs(slug)
        .filter(status=JobStatus.RETRYING, updated_at__gte=since, updated_at__lt=until)
        .aggregate(attempts=Sum("attempts", default=0), jobs=Count("pk"))
    )
    job_events = totals["attempts"] + retrying["attempts"]
    job_failures = job_events - totals["succeeded"]
    attempts = DeliveryAttempt.objects.filter(
        started_at__gte=since,
        started_at__lt=until,
        delivery__event__in=project_events_since(slug, since),
    ).aggregate(
        all=Count("pk"),
        failed=Count("pk", filter=~Q(outcome=AttemptOutcome.DELIVERED)),
        server_errors=Count("pk", filter=Q(status_code__gte=500)),
    )
    events = job_events + attempts["all"]
    failures = job_failures + attempts["failed"]
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "events": events,
        "failures": failures,
        "failure_rate": round(failures / events, 4) if events else 0.0,
        "jobs": {
            "attempts": job_events,
            "failed_attempts": job_failures,
            "dead": totals["dead"],
            "retrying": retrying["jobs"],
        },
        "deliveries": {
            "attempts": attempts["all"],
            "failed_attempts": attempts["failed"],
            "server_errors": attempts["server_errors"],
        },
    }


def run_check(command: str, *, deployment: Deployment, timeout: int) -> dict:
    """Run the environment's health-check command as a step runs; exit 0 is healthy.

    In the deployment's directory (when it is on this host) with a step's environment (never
    the worker's own: deployments.runner.process_env).
    """
    cwd = deployment.project_dir
    directory = cwd if cwd and Path(cwd).is_dir() else None
    env = step_process_env(
        deployment=deployment,
        project=deployment.project,
        step={"name": "health-check"},
        position=0,
        workdir=directory or "",
    )
    try:
        done = subprocess.run(  # noqa: S602 - the project's own declared command
            command,
            shell=True,
            cwd=directory,
            env=env,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"command": command, "ok": False, "exit_code": None, "output": "timed out"}
    # Masked as a step's log is: the check runs with the project's secrets.
    masked = SecretMasker(project_secrets(deployment.project)).mask(done.stdout + done.stderr)
    output = masked.decode(errors="replace")[-MAX_CHECK_OUTPUT:]
    return {
        "command": command,
        "ok": done.returncode == 0,
        "exit_code": done.returncode,
        "output": output,
    }


def breaches(rules: dict, after: dict, before: dict, check: dict | None) -> list[str]:
    """Return why the figures breach the rules (empty: healthy)."""
    found = []
    if (
        after["events"] >= rules["min_events"]
        and after["failure_rate"] > rules["max_failure_rate"]
        and after["failure_rate"] > before["failure_rate"]
    ):
        found.append(
            f"failure rate {after['failure_rate']:.2%} over {after['events']} events is above "
            f"{rules['max_failure_rate']:.2%} and the {before['failure_rate']:.2%} before"
        )
    if check is not None and not check["ok"]:
        found.append(f"health check {check['command']!r} failed (exit {check['exit_code']})")
    return found


def health_evaluate(deployment_id: int, *, interim: bool = False) -> dict:
    """Judge a watched deployment at its window's end; return its health (idempotent).

    An ``interim`` check (every ``interval`` during the window) measures the window so far
    and ends the watch only on a breach; without one the deployment stays ``watching``.
    """
    deployment = Deployment.objects.select_related("project").get(pk=deployment_id)
    health = deployment.health or {}
    if health.get("status") != HEALTH_WATCHING:
        return health
    rules = health["rules"]
    window = timedelta(seconds=rules["window"])
    finished = deployment.finished_at
    slug = deployment.project.slug
    end = min(finished + window, timezone.now()) if interim else finished + window
    after = health_figures(slug, finished, end)
    before = health_figures(slug, finished - window, finished)
    check = None
    if rules.get("check"):
        check = run_check(
            rules["check"],
            deployment=deployment,
            timeout=rules.get("check_timeout") or DEFAULT_CHECK_TIMEOUT,
        )
    reasons = breaches(rules, after, before, check)
    if interim and not reasons:
        return health
    verdict = {
        **health,
        "status": HEALTH_UNHEALTHY if reasons else HEALTH_HEALTHY,
        "evaluated_at": timezone.now().isoformat(),
        "early": interim,
        "reasons": reasons,
        "figures": {"after": after, "before": before, "check": check},
    }
    with transaction.atomic():
        moved = Deployment.objects.filter(pk=deployment.pk, health__status=HEALTH_WATCHING).update(
            health=verdict
        )
        if not moved:  # another run of this job judged it first
            deployment.refresh_from_db()
            return deployment.health
        deployment.health = verdict
        DeploymentEvent.objects.create(
            deployment=deployment,
            kind="unhealthy" if reasons else "healthy",
            at=timezone.now(),
            details={"reasons": reasons, "figures": verdict["figures"]},
        )
        log_deployment("deployment.health", deployment, health=verdict["status"])
        if reasons:
            AuditLog.objects.create(
                actor="health-gate",
                action="deployment.unhealthy",
                target_type="deployment",
                target_id=str(deployment.pk),
                details={"reasons": reasons, "figures": verdict["figures"]},
            )
            emit_unhealthy(deployment, verdict)
    if reasons and rules.get("rollback"):
        verdict["rollback"] = _roll_back(deployment, reasons)
        Deployment.objects.filter(pk=deployment.pk).update(health=verdict)
    return verdict


def _roll_back(deployment: Deployment, reasons: list[str]) -> dict:
    """Start the rollback of an unhealthy deployment; return what happened (recorded)."""
    from deployments.rollback import current_deployment, deployment_rollback

    current = current_deployment(deployment.project, deployment.environment)
    if current is None or current.pk != deployment.pk:
        return {"started": False, "error": "no longer the current deployment"}
    try:
        rollback = deployment_rollback(
            project=deployment.project,
            environment=deployment.environment,
            triggered_by="health-gate",
            idempotency_key=f"health-rollback-{deployment.pk}",
            reason=f"deployment {deployment.pk} unhealthy: " + "; ".join(reasons),
        )
    except DeploymentError as exc:
        logger.warning(
            "deployment.health_rollback_refused",
            extra={"deployment_id": deployment.pk, "error": str(exc)},
        )
        return {"started": False, "error": str(exc)}
    return {"started": True, "deployment_id": rollback.pk, "status": rollback.status}
