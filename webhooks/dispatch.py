"""The notify() dispatcher: the one way the rest of Conveyor announces something.

Minimal version: in-app notifications only. Webhook fan-out (Event + one delivery job per
subscribed endpoint) is built on top of this by the webhooks app.
"""

from jobs.models import Notification

TOPICS = (
    "deployment.created",
    "deployment.started",
    "deployment.succeeded",
    "deployment.failed",
    "deployment.cancelled",
    "job.dead",
    "workspace.sync_failed",
    "worktree.prune_pending",
    "worktree.pruned",
)


def notify(topic: str, data: dict, *, recipients=None) -> None:
    """Write one in-app Notification per recipient (users or ids) in the caller's transaction."""
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}")
    ids = [getattr(r, "pk", r) for r in (recipients or [])]
    Notification.objects.bulk_create(
        Notification(recipient_id=user_id, topic=topic, title=topic, data=data) for user_id in ids
    )
