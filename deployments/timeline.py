"""One causal timeline of a deployment: every event, in time order, from every row that saw it.

Sources, none of them written for the timeline except ``DeploymentEvent``:

* the deployment's own timestamps — created (by whom), claimed (by which worker), cancel
  requested, finished (with its reason);
* ``DeploymentEvent`` — waiting for the environment, behind which deployment; released
  (approved enough, from waiting for approval to pending);
* the AuditLog — who approved or rejected it (with their comment), who cancelled or retried
  it, and freeze overrides (each names the person and the token: ``alice via token:ci``);
* ``DeploymentEvent`` again — the health gate's verdict (healthy, or unhealthy with the
  figures that tripped it; deployments.health);
* the AuditLog again — a rollback made of it (by the health gate: with the reason) and a
  recovery of the failures that followed it (deployments.recovery);
* its step runs — each step's start, exit code and duration;
* its job — each attempt's end (worker, outcome, reason);
* its webhook events, every delivery attempt of them (endpoint, status code, latency) and the
  in-app notifications it caused;
* the workflows it started (``enqueue(started_by=deployment)``): each one's start and, once
  every job of it has ended, its end with its status and its jobs' counts.

A webhook endpoint's URL can be a credential (Slack-style URLs) and a delivery's error can
echo it, so a delivery attempt names its endpoint by id and description only, unless the
caller may see webhooks (``show_webhook_urls``: an admin-scope token, a console user with
the endpoint view permission); then it also carries ``endpoint`` (the URL) and ``error``.

Each entry is ``{"at", "kind", "summary", ...details}``; ``kind`` is a ``Kind``.
"""

import enum
from datetime import datetime

from django.db.models import Count, Max, Q

from deployments.models import Deployment, DeploymentEvent, FailureReason, StepRun
from deployments.selectors import person_of
from jobs import attempts
from jobs.models import AuditLog, Job, Notification, Workflow
from jobs.workflows.rows import started_by_key
from jobs.workflows.state import WorkflowStatus, status_of
from project.timing import seconds_between
from webhooks.models import DeliveryAttempt, Event


class Kind(enum.StrEnum):
    """What a timeline entry is; at equal times, entries sort in this (causal) order."""

    CREATED = "created"
    WAITING = "waiting"
    WAITING_FOR_DEPLOYER = "waiting_for_deployer"
    APPROVED = "approved"
    REJECTED = "rejected"
    RELEASED = "released"
    FREEZE_OVERRIDE = "freeze_override"
    CLAIMED = "claimed"
    STEP_STARTED = "step_started"
    STEP_FINISHED = "step_finished"
    CANCEL_REQUESTED = "cancel_requested"
    JOB_ATTEMPT = "job_attempt"
    FINISHED = "finished"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    ROLLED_BACK = "rolled_back"
    RETRIED = "retried"
    RECOVERY = "recovery"
    WEBHOOK_EVENT = "webhook_event"
    DELIVERY_ATTEMPT = "delivery_attempt"
    NOTIFICATION = "notification"
    WORKFLOW_STARTED = "workflow_started"
    WORKFLOW_ENDED = "workflow_ended"


_ORDER = {kind: index for index, kind in enumerate(Kind)}
# Cap per source, so a deployment with a runaway receiver still gives a bounded answer.
LIMIT_PER_SOURCE = 500


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return seconds_between(start, end)


def _entry(at, kind: Kind, summary: str, **details) -> dict:
    return {"at": at, "kind": kind, "summary": summary, **details}


def deployment_timeline(deployment: Deployment, *, show_webhook_urls: bool = False) -> list[dict]:
    """Return every event of ``deployment`` in time order (ties keep causal order).

    Endpoint URLs and delivery errors are left out unless ``show_webhook_urls``.
    """
    d = deployment
    entries = [
        _entry(
            d.created_at,
            Kind.CREATED,
            f"created by {d.triggered_by}"
            + (f" as attempt {d.attempt}, retry of #{d.retry_of_id}" if d.retry_of_id else ""),
            actor=d.triggered_by,
            user=person_of(d),
            retry_of=d.retry_of_id,
            attempt=d.attempt,
            job_id=d.job_id,
        )
    ]
    for event in DeploymentEvent.objects.filter(deployment=d)[:LIMIT_PER_SOURCE]:
        entries.append(_event(d, event))
    if d.started_at:
        entries.append(
            _entry(
                d.started_at,
                Kind.CLAIMED,
                f"claimed by worker {d.worker or '?'}",
                worker=d.worker,
                job_id=d.job_id,
            )
        )
    entries += _steps(d)
    entries += _audit(d)
    if d.cancel_requested_at and not any(e["kind"] == Kind.CANCEL_REQUESTED for e in entries):
        entries.append(
            _entry(
                d.cancel_requested_at,
                Kind.CANCEL_REQUESTED,
                f"stop requested ({d.failure_reason or 'cancel'})",
                actor="policy" if d.failure_reason == FailureReason.SUPERSEDED else "",
            )
        )
    entries += _job_attempts(d)
    if d.finished_at:
        reason = f" ({d.failure_reason})" if d.failure_reason else ""
        entries.append(
            _entry(
                d.finished_at,
                Kind.FINISHED,
                f"finished {d.status}{reason}",
                status=d.status,
                failure_reason=d.failure_reason or None,
                error=d.error[:1000] or None,
                duration_seconds=_seconds(d.started_at, d.finished_at),
            )
        )
    entries += _webhooks(d, show_webhook_urls)
    entries += _notifications(d)
    entries += _workflows(d)
    entries.sort(key=lambda e: (e["at"], _ORDER[e["kind"]]))
    return entries


def _event(d: Deployment, event: DeploymentEvent) -> dict:
    if event.kind == DeploymentEvent.WAITING_FOR_DEPLOYER:
        note = event.details.get("waiting_for", "")
        return _entry(event.at, Kind(event.kind), f"waiting for {note}", waiting_for=note)
    if event.kind in (Kind.HEALTHY, Kind.UNHEALTHY):
        reasons = event.details.get("reasons") or []
        return _entry(
            event.at,
            Kind(event.kind),
            f"health gate: {event.kind}" + (f" ({'; '.join(reasons)})" if reasons else ""),
            reasons=reasons,
            figures=event.details.get("figures"),
        )
    if event.kind == DeploymentEvent.RELEASED:
        approvals = event.details.get("approvals")
        return _entry(
            event.at,
            Kind(event.kind),
            f"released with {approvals} approval{'s' if approvals != 1 else ''}: pending",
            approvals=approvals,
            required=event.details.get("required"),
        )
    behind = event.details.get("behind")
    return _entry(
        event.at,
        Kind(event.kind),
        f"waiting for {d.environment} behind deployment #{behind}"
        if behind
        else f"waiting for {d.environment}",
        behind=behind,
    )


def _steps(d: Deployment) -> list[dict]:
    found = []
    for run in StepRun.objects.filter(deployment=d).order_by("position"):
        if run.started_at:
            found.append(
                _entry(
                    run.started_at,
                    Kind.STEP_STARTED,
                    f"step {run.position} {run.name} started",
                    step=run.name,
                    position=run.position,
                )
            )
        if run.finished_at:
            exit_text = "" if run.exit_code is None else f", exit {run.exit_code}"
            seconds = _seconds(run.started_at, run.finished_at)
            found.append(
                _entry(
                    run.finished_at,
                    Kind.STEP_FINISHED,
                    f"step {run.position} {run.name} {run.status}{exit_text}"
                    + (f" after {seconds:.1f}s" if seconds is not None else ""),
                    step=run.name,
                    position=run.position,
                    status=run.status,
                    exit_code=run.exit_code,
                    duration_seconds=seconds,
                )
            )
    return found


def _audit(d: Deployment) -> list[dict]:
    found = []
    rows = AuditLog.objects.filter(target_type="deployment", target_id=str(d.pk)).order_by("at")
    for row in rows[:LIMIT_PER_SOURCE]:
        if row.action == "deployment.cancel":
            found.append(
                _entry(
                    row.at,
                    Kind.CANCEL_REQUESTED,
                    f"cancel requested by {row.actor}",
                    actor=row.actor,
                )
            )
        elif row.action in ("deployment.approved", "deployment.rejected"):
            kind = Kind(row.action.removeprefix("deployment."))
            comment = row.details.get("comment") or None
            found.append(
                _entry(
                    row.at,
                    kind,
                    f"{kind} by {row.actor}" + (f": {comment}" if comment else ""),
                    actor=row.actor,
                    comment=comment,
                )
            )
        elif row.action == "deployment.freeze_override":
            window = row.details.get("window")
            found.append(
                _entry(
                    row.at,
                    Kind.FREEZE_OVERRIDE,
                    f"freeze window {window!r} overridden by {row.actor}",
                    actor=row.actor,
                    window=window,
                )
            )
        elif row.action == "deployment.rollback":
            new, reason = row.details.get("new_deployment"), row.details.get("reason")
            found.append(
                _entry(
                    row.at,
                    Kind.ROLLED_BACK,
                    f"rolled back by {row.actor} as deployment #{new}"
                    + (f": {reason}" if reason else ""),
                    actor=row.actor,
                    new_deployment=new,
                    reason=reason,
                )
            )
        elif row.action == "deployment.recover":
            found.append(
                _entry(
                    row.at,
                    Kind.RECOVERY,
                    f"recovery of {row.details.get('jobs', 0)} job(s) and "
                    f"{row.details.get('deliveries', 0)} delivery(ies) started by {row.actor}",
                    actor=row.actor,
                    **row.details,
                )
            )
        elif row.action == "deployment.retry":
            new = row.details.get("new_deployment")
            found.append(
                _entry(
                    row.at,
                    Kind.RETRIED,
                    f"retried by {row.actor} as deployment #{new}",
                    actor=row.actor,
                    new_deployment=new,
                )
            )
    return found


def _job_attempts(d: Deployment) -> list[dict]:
    job = Job.objects.filter(pk=d.job_id).first() if d.job_id else None
    if job is None:
        return []
    found = []
    for entry in attempts.history(job):
        if entry["finished_at"] is None:
            continue
        reason = f" ({entry['reason']})" if entry["reason"] else ""
        found.append(
            _entry(
                entry["finished_at"],
                Kind.JOB_ATTEMPT,
                f"job {job.pk} attempt {entry['attempt']} on {entry['worker']}: "
                f"{entry['outcome']}{reason}",
                job_id=job.pk,
                attempt=entry["attempt"],
                worker=entry["worker"],
                outcome=entry["outcome"],
                reason=entry["reason"] or None,
                error=attempts.describe(entry["error"]) or None,
            )
        )
    return found


def _webhooks(d: Deployment, show_urls: bool) -> list[dict]:
    events = list(
        Event.objects.filter(
            type__startswith="deployment.", body__contains=f'"deployment_id":{d.pk},'
        ).order_by("created_at")[:LIMIT_PER_SOURCE]
    )
    found = [
        _entry(
            event.created_at,
            Kind.WEBHOOK_EVENT,
            f"event {event.type} ({event.message_id})",
            topic=event.type,
            event_id=event.message_id,
        )
        for event in events
    ]
    tries = (
        DeliveryAttempt.objects.filter(delivery__event__in=events)
        .select_related("delivery__endpoint", "delivery__event")
        .order_by("started_at")[:LIMIT_PER_SOURCE]
    )
    for attempt in tries:
        endpoint = attempt.delivery.endpoint
        code = attempt.status_code if attempt.status_code is not None else "no answer"
        latency = f", {attempt.latency_ms} ms" if attempt.latency_ms is not None else ""
        named = endpoint.url if show_urls else _endpoint_name(endpoint)
        visible = {"endpoint": endpoint.url, "error": attempt.error or None} if show_urls else {}
        found.append(
            _entry(
                attempt.started_at,
                Kind.DELIVERY_ATTEMPT,
                f"{attempt.delivery.event.type} to {named}: "
                f"attempt {attempt.number}, {code}{latency} ({attempt.outcome})",
                topic=attempt.delivery.event.type,
                delivery_id=attempt.delivery_id,
                endpoint_id=endpoint.pk,
                endpoint_description=endpoint.description,
                attempt=attempt.number,
                status_code=attempt.status_code,
                latency_ms=attempt.latency_ms,
                outcome=attempt.outcome,
                **visible,
            )
        )
    return found


def _endpoint_name(endpoint) -> str:
    return f"endpoint #{endpoint.pk}" + (
        f" ({endpoint.description})" if endpoint.description else ""
    )


def _notifications(d: Deployment) -> list[dict]:
    rows = (
        Notification.objects.filter(Q(data__deployment_id=d.pk))
        .select_related("recipient")
        .order_by("created_at")[:LIMIT_PER_SOURCE]
    )
    return [
        _entry(
            n.created_at,
            Kind.NOTIFICATION,
            f"notified {n.recipient.get_username()}: {n.title}",
            recipient=n.recipient.get_username(),
            topic=n.topic,
            title=n.title,
        )
        for n in rows
    ]


def _workflows(d: Deployment) -> list[dict]:
    """The workflows ``d`` started: their starts, and the ends of those whose jobs all ended."""
    started = list(
        Workflow.objects.filter(started_by=started_by_key(d)).order_by("id")[:LIMIT_PER_SOURCE]
    )
    counts: dict[int, dict[str, int]] = {workflow.pk: {} for workflow in started}
    ended: dict[int, datetime] = {}
    rows = (
        Job.objects.filter(workflow__in=started)
        .order_by()
        .values("workflow_id", "status")
        .annotate(n=Count("id"), last=Max("finished_at"))
    )
    for row in rows:  # one query for them all, on the jobs' workflow index
        counts[row["workflow_id"]][row["status"]] = row["n"]
        if row["last"] is not None:
            last = ended.get(row["workflow_id"])
            ended[row["workflow_id"]] = row["last"] if last is None else max(last, row["last"])
    entries = []
    for workflow in started:
        named = f" {workflow.name!r}" if workflow.name else ""
        entries.append(
            _entry(
                workflow.created_at,
                Kind.WORKFLOW_STARTED,
                f"started workflow {workflow.pk}{named} ({workflow.node_count} jobs)",
                workflow_id=workflow.pk,
                name=workflow.name,
                jobs=workflow.node_count,
            )
        )
        status = status_of(workflow, counts[workflow.pk])
        if status == WorkflowStatus.RUNNING:
            continue
        entries.append(
            _entry(
                ended.get(workflow.pk) or workflow.cancelled_at or workflow.created_at,
                Kind.WORKFLOW_ENDED,
                f"workflow {workflow.pk}{named} {status}",
                workflow_id=workflow.pk,
                status=status,
                counts=counts[workflow.pk],
            )
        )
    return entries
