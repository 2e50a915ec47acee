"""Pause or resume one state row (a ``QueueState`` or a ``TaskState``), exactly and audited.

The row is created first and committed (a claim locks only an existing row); then, in one
transaction, ``SELECT … FOR UPDATE`` waits for every claim that holds it (FOR KEY SHARE, or a
limited claim's FOR UPDATE) to commit, the pause is written with an AuditLog row
(``<kind>.pause`` / ``<kind>.resume``), and a resume rings for the due jobs once it commits.
"""

import logging

from django.db import transaction
from django.utils import timezone

from jobs.models import AuditLog

logger = logging.getLogger("jobs")


def set_paused(model, name: str, *, kind: str, paused: bool, actor: str, ring) -> None:
    """Pause or resume ``model``'s row ``name``; ``ring(name)`` runs after a resume commits."""
    now = timezone.now()
    model.objects.bulk_create([model(name=name, updated_at=now)], ignore_conflicts=True)
    with transaction.atomic():
        state = model.objects.select_for_update().get(name=name)
        was_paused = state.paused_at is not None
        if paused and not was_paused:
            state.paused_at, state.paused_by = now, actor
        elif not paused:
            state.paused_at, state.paused_by = None, ""
        state.updated_at = now
        state.save(update_fields=["paused_at", "paused_by", "updated_at"])
        action = f"{kind}.pause" if paused else f"{kind}.resume"
        AuditLog.objects.create(
            actor=actor,
            action=action,
            target_type=kind,
            target_id=name,
            details={"was_paused": was_paused},
        )
        if not paused:
            transaction.on_commit(lambda: ring(name), robust=True)
    logger.info(action, extra={kind: name, "actor": actor, "was_paused": was_paused})
