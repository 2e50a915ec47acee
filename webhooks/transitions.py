"""The one place a Delivery changes status: a conditional UPDATE guarded by TRANSITIONS."""

from collections.abc import Iterable
from functools import cache

from django.db.models import Q, QuerySet
from django.utils import timezone

from project import state_machine
from webhooks import statements
from webhooks.errors import DeliveryConflict
from webhooks.models import TRANSITIONS, Delivery, DeliveryStatus


def sources_of(to: str) -> frozenset[str]:
    """Return every status from which ``to`` may be reached."""
    return state_machine.sources_of(TRANSITIONS, to)


def delivery_move(
    where: Q, to: DeliveryStatus, *, from_: Iterable[str] | None = None, **changes
) -> int:
    """Move the deliveries matching ``where`` to ``to``; return how many moved.

    ``from_`` narrows the allowed sources; naming one TRANSITIONS does not allow raises
    DeliveryConflict. Zero means a lost race or a move the current status does not allow.
    """
    queryset, changes = delivery_move_update(where, to, from_=from_, **changes)
    return queryset.update(**changes)


def delivery_move_update(
    where: Q, to: DeliveryStatus, *, from_: Iterable[str] | None = None, **changes
) -> tuple[QuerySet, dict]:
    """Return ``delivery_move()``'s guarded UPDATE without running it: (queryset, changes).

    For a caller that sends the move in one statement with other writes
    (``webhooks.statements``); the checks are the same and happen here.
    """
    sources = state_machine.allowed_sources(TRANSITIONS, to, from_, DeliveryConflict)
    changes.setdefault("updated_at", timezone.now())
    return Delivery.objects.filter(where, status__in=sources), {"status": to, **changes}


def delivery_move_row(
    pk: int, to: DeliveryStatus, *, from_: Iterable[str], **changes
) -> statements.Statement:
    """Return ``delivery_move()``'s guarded UPDATE of one delivery without running it.

    The same move as ``delivery_move_update()``, written once per shape
    (``statements.update_row``): the delivery hot path runs it at every attempt.
    """
    changes.setdefault("updated_at", timezone.now())
    guard = _status_guard(to, frozenset(from_))
    return statements.update_row(Delivery, pk, {"status": to, **changes}, guard=guard)


@cache
def _status_guard(to: str, from_: frozenset[str]) -> str:
    sources = state_machine.allowed_sources(TRANSITIONS, to, from_, DeliveryConflict)
    listed = ", ".join(f"'{source}'" for source in sorted(sources))  # TextChoices values
    return f"status IN ({listed})"
