"""The one place a Deployment changes state: a conditional UPDATE guarded by TRANSITIONS.

Same contract as ``jobs.transitions``: ``transition()`` moves every deployment matching
``where`` whose status may legally move to ``to`` and returns the rows as updated (one
``UPDATE ... RETURNING``). An empty list is a lost race or an illegal move; the caller says
which. Every move stamps ``updated_at``; entering ``running`` stamps ``started_at``,
``cancelling`` stamps ``cancel_requested_at`` and a final state stamps ``finished_at``.
"""

from collections.abc import Iterable

from django.db.models import Q
from django.utils import timezone

from deployments.models import FINISHED, TRANSITIONS, Deployment, DeploymentStatus
from jobs.errors import IllegalTransition
from jobs.transitions import update_returning

S = DeploymentStatus


def sources_of(to: str) -> frozenset[str]:
    """Return every status from which ``to`` may be reached."""
    return frozenset(src for src, targets in TRANSITIONS.items() if to in targets)


def transition(
    where: Q, to: DeploymentStatus, *, from_: Iterable[str] | None = None, **changes
) -> list[Deployment]:
    """Move the deployments matching ``where`` to ``to``; return them as they are now."""
    allowed = sources_of(to)
    sources = allowed if from_ is None else frozenset(from_)
    if not sources or not sources <= allowed:
        raise IllegalTransition(f"{sorted(sources - allowed) or '[]'} -> {to} is not allowed")
    now = timezone.now()
    changes = {"status": to, "updated_at": now, **changes}
    if to == S.RUNNING:
        changes.setdefault("started_at", now)
    if to == S.CANCELLING:
        changes.setdefault("cancel_requested_at", now)
    if to in FINISHED:
        changes.setdefault("finished_at", now)
    return update_returning(Deployment.objects.filter(where, status__in=sources), changes)
