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
from project import state_machine
from project.state_machine import update_returning

S = DeploymentStatus


def sources_of(to: str) -> frozenset[str]:
    """Return every status from which ``to`` may be reached."""
    return state_machine.sources_of(TRANSITIONS, to)


def transition(
    where: Q, to: DeploymentStatus, *, from_: Iterable[str] | None = None, **changes
) -> list[Deployment]:
    """Move the deployments matching ``where`` to ``to``; return them as they are now."""
    sources = state_machine.allowed_sources(TRANSITIONS, to, from_, IllegalTransition)
    now = timezone.now()
    changes = {"status": to, "updated_at": now, **changes}
    if to == S.RUNNING:
        changes.setdefault("started_at", now)
    if to == S.CANCELLING:
        changes.setdefault("cancel_requested_at", now)
    if to in FINISHED:
        changes.setdefault("finished_at", now)
    return update_returning(Deployment.objects.filter(where, status__in=sources), changes)
