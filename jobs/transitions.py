"""The one place a Job changes state: a conditional UPDATE guarded by TRANSITIONS.

``transition()`` moves every job matching ``where`` whose current status may legally move to
``to`` and returns the rows as they are after the UPDATE (``UPDATE ... RETURNING``, one
statement). An empty list means a lost race or a move the current status does not allow;
callers decide which of the two that is, never silence.
"""

from collections.abc import Iterable

from django.db.models import Q
from django.utils import timezone

from jobs.errors import IllegalTransition
from jobs.models import FINISHED, TRANSITIONS, Job, JobStatus
from project import state_machine
from project.state_machine import update_returning


def sources_of(to: str) -> frozenset[str]:
    """Return every status from which ``to`` may be reached."""
    return state_machine.sources_of(TRANSITIONS, to)


def transition(
    where: Q,
    to: JobStatus,
    *,
    from_: Iterable[str] | None = None,
    using: str = "default",
    defer: tuple[str, ...] = (),
    **changes,
) -> list[Job]:
    """Move the jobs matching ``where`` to ``to``; return them as they are now.

    ``from_`` narrows the allowed source states; naming a source that TRANSITIONS does not
    allow raises IllegalTransition. Every move stamps ``updated_at``; entering ``running``
    stamps ``started_at`` and entering a final state stamps ``finished_at``.
    """
    sources = state_machine.allowed_sources(TRANSITIONS, to, from_, IllegalTransition)
    now = timezone.now()
    changes = {"status": to, "updated_at": now, **changes}
    if to == JobStatus.RUNNING:
        changes.setdefault("started_at", now)
    if to in FINISHED:
        changes.setdefault("finished_at", now)
        changes.setdefault("lease_expires_at", None)
    queryset = Job.objects.using(using).filter(where, status__in=sources)
    return update_returning(queryset, changes, defer=defer)
