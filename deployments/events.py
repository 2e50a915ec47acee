"""Announce what happens to a deployment: one structured log line, one notify() event.

Log lines carry ``deployment_id, pipeline, project, project_dir, status`` (plus whatever the
caller adds), so an operator can follow one deployment through web and worker logs.
Events go through ``webhooks.notify`` inside the caller's transaction: a state change and
its announcement commit together or not at all.
"""

import logging

from django.contrib.auth import get_user_model

import webhooks
from deployments.models import Deployment, DeploymentStatus

logger = logging.getLogger("deployments")

# Final status -> event topic.
FINAL_TOPICS = {
    DeploymentStatus.SUCCESS: "deployment.succeeded",
    DeploymentStatus.FAILED: "deployment.failed",
    DeploymentStatus.CANCELLED: "deployment.cancelled",
}
# Topics that also land in the in-app inbox of the user who triggered the deployment.
INBOX_TOPICS = frozenset({"deployment.failed", "deployment.unhealthy"})


def log_deployment(event: str, deployment: Deployment, **fields) -> None:
    """Log one structured line about ``deployment``."""
    logger.info(
        event,
        extra={
            "deployment_id": deployment.pk,
            "project": deployment.project.slug,
            "environment": deployment.environment,
            "pipeline": deployment.pipeline_name,
            "project_dir": deployment.project_dir,
            "status": deployment.status,
            "ref": deployment.ref,
            "commit_sha": deployment.commit_sha,
            "failure_reason": deployment.failure_reason,
            "attempt": deployment.attempt,
            **fields,
        },
    )


def event_data(deployment: Deployment) -> dict:
    """Return the payload of a ``deployment.*`` event."""
    return {
        "deployment_id": deployment.pk,
        "project": deployment.project.slug,
        "environment": deployment.environment,
        "ref": deployment.ref,
        "commit": deployment.commit_sha,
        "status": deployment.status,
        "failure_reason": deployment.failure_reason or None,
        "pipeline": deployment.pipeline_name,
        "attempt": deployment.attempt,
        "retry_of": deployment.retry_of_id,
        "rollback": deployment.rollback_of_id is not None,
        "rollback_of": deployment.rollback_of_id,
        "triggered_by": deployment.triggered_by,
    }


def _recipients(deployment: Deployment, topic: str) -> list:
    if topic not in INBOX_TOPICS:
        return []
    users = get_user_model().objects.filter(is_active=True)
    if deployment.triggered_by_user_id is not None:
        return list(users.filter(pk=deployment.triggered_by_user_id).values_list("pk", flat=True))
    return list(users.filter(username=deployment.triggered_by).values_list("pk", flat=True))


def emit(topic: str, deployment: Deployment) -> None:
    """Log and announce ``topic`` for ``deployment`` (in the caller's transaction)."""
    data = event_data(deployment)
    log_deployment("deployment.event", deployment, topic=topic)
    webhooks.notify(topic, data, recipients=_recipients(deployment, topic))


def emit_finished(deployment: Deployment) -> None:
    """Announce a deployment that reached a final status."""
    emit(FINAL_TOPICS[deployment.status], deployment)


def emit_approval_requested(deployment: Deployment, rules, recipients: list) -> None:
    """Announce a deployment waiting for approval: webhook and its approvers' inboxes."""
    data = {
        **event_data(deployment),
        "required_approvals": rules.required_approvals,
        "approvers": {"users": rules.approver_users, "groups": rules.approver_groups},
        "title": f"Approve deployment {deployment.pk} of {deployment.project.slug} "
        f"to {deployment.environment}",
        "message": f"{deployment.triggered_by} wants to deploy {deployment.ref} to "
        f"{deployment.environment}; it needs {rules.required_approvals} approval(s).",
    }
    log_deployment("deployment.event", deployment, topic="deployment.approval_requested")
    webhooks.notify("deployment.approval_requested", data, recipients=recipients)


def emit_unhealthy(deployment: Deployment, health: dict) -> None:
    """Announce that the health gate found ``deployment`` unhealthy, with the figures."""
    data = {
        **event_data(deployment),
        "reasons": health.get("reasons", []),
        "figures": health.get("figures"),
        "title": f"Deployment {deployment.pk} of {deployment.project.slug} to "
        f"{deployment.environment} is unhealthy",
        "message": "; ".join(health.get("reasons", [])),
    }
    log_deployment("deployment.event", deployment, topic="deployment.unhealthy")
    topic = "deployment.unhealthy"
    webhooks.notify(topic, data, recipients=_recipients(deployment, topic))
