"""Queues as operators see them: the declared ones, pause and resume, use and limits.

A queue is declared by project.celery (Conveyor's own queues and those ``TASKS`` entries on
Conveyor's backend name), or provided by an app at run time (``add_provider``: the
deployments app provides each live deployer host's ``deployments.host.<host>``). Its state is
a ``QueueState`` row:

* ``pause(name)`` stops every claim of the queue's jobs: it locks the row the claim reads in
  the same statement (jobs.statements), so when it returns no job of the queue starts
  anywhere; runs already under way finish. Doorbells that arrive meanwhile are dropped.
* ``resume(name)`` clears it and, once that commits, rings a doorbell for every due job of
  the queue, so the backlog drains at once rather than at the next sweep.

Both are recorded in the AuditLog (``queue.pause`` / ``queue.resume``). A queue's limit is
``CONVEYOR_QUEUE_CONCURRENCY`` (jobs.conf): the most of its jobs running at once everywhere.
"""

import logging
from collections.abc import Callable, Iterable

from celery import signals
from django.db import close_old_connections
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from jobs import conf
from jobs.models import PENDING, Job, JobStatus, QueueState
from jobs.pausing import set_paused
from jobs.publish import publish

logger = logging.getLogger("jobs")


class UnknownQueue(LookupError):
    """No queue of that name is declared."""


_providers: dict[str, Callable[[], Iterable[str]]] = {}


def add_provider(provider: Callable[[], Iterable[str]], *, name: str) -> None:
    """Declare the queues ``provider()`` names at each call (queues that come and go)."""
    _providers[name] = provider


def declared() -> tuple[str, ...]:
    """Return the names of every declared queue, Conveyor's own first, then provided ones."""
    from project.celery import QUEUES, django_task_queues

    static = QUEUES + django_task_queues()
    provided = [q for provider in _providers.values() for q in provider() if q not in static]
    return static + tuple(dict.fromkeys(provided))


def _require_declared(name: str) -> None:
    from project.celery import is_declared

    if not is_declared(name):
        raise UnknownQueue(f"no queue named {name!r} is declared")


def ensure_states(names=None) -> None:
    """Create the state rows of ``names`` (default: every declared queue) that are missing."""
    now = timezone.now()
    rows = [QueueState(name=name, updated_at=now) for name in (names or declared())]
    QueueState.objects.bulk_create(rows, ignore_conflicts=True)


def pause(name: str, *, actor: str) -> dict:
    """Pause queue ``name``: once this returns, none of its jobs starts; return its state."""
    return _set_paused(name, paused=True, actor=actor)


def resume(name: str, *, actor: str) -> dict:
    """Resume queue ``name`` and ring for its due jobs once that commits; return its state."""
    return _set_paused(name, paused=False, actor=actor)


def _set_paused(name: str, *, paused: bool, actor: str) -> dict:
    _require_declared(name)
    set_paused(QueueState, name, kind="queue", paused=paused, actor=actor, ring=ring)
    return describe([name])[0]


def ring(name: str, *, task: str | None = None, limit: int | None = None) -> int:
    """Publish doorbells for queue ``name``'s due jobs (of ``task``; the best ``limit``)."""
    due = Job.objects.filter(queue=name, status__in=PENDING, run_after__lte=timezone.now())
    if task is not None:
        due = due.filter(task=task)
    jobs = due.only("id", "task", "queue", "run_after").order_by("-priority", "run_after", "id")
    return publish(list(jobs[:limit] if limit is not None else jobs))


def ring_task(task: str) -> int:
    """Ring for ``task``'s best due job in each queue that is not paused: a slot of its
    limit is free.

    A task's limit holds across queues while a message's claim takes jobs of its own queue
    only, so ringing the freed run's queue alone would leave a job held in another queue to
    the sweeper. The queues are the ``QueueState`` rows (a limited claim makes its queue's),
    read in one statement with one range of ``job_runnable_idx`` per queue.
    """
    now = timezone.now()
    due = Job.objects.filter(
        queue=OuterRef("name"), task=task, status__in=PENDING, run_after__lte=now
    ).order_by("-priority", "run_after", "id")
    states = QueueState.objects.filter(paused_at__isnull=True).order_by()
    best = states.annotate(best=Subquery(due.values("id")[:1])).values_list("best", flat=True)
    ids = [job_id for job_id in best if job_id is not None]
    if not ids:  # the usual case after a run ends with nothing held: one statement
        return 0
    return publish(list(Job.objects.filter(pk__in=ids).only("id", "task", "queue", "run_after")))


def paused_names() -> set[str]:
    """Return the names of the paused queues."""
    paused = QueueState.objects.filter(paused_at__isnull=False).order_by()
    return set(paused.values_list("name", flat=True))


def use(names) -> dict[str, tuple[int, int]]:
    """Return ``{queue: (running, waiting)}`` from the engine's accounting (jobs.accounting).

    Waiting is ``queued`` plus ``retrying``. The claim's own limit check counts running rows
    in its statement instead (it must see its transaction's snapshot); this is for reading.
    """
    from jobs.accounting import counts

    found = {name: [0, 0] for name in names}
    for (queue, _, status), n in counts.read().items():
        if queue in found and status == JobStatus.RUNNING:
            found[queue][0] += n
        elif queue in found and status in PENDING:
            found[queue][1] += n
    return {name: (running, waiting) for name, (running, waiting) in found.items()}


def describe(names=None) -> list[dict]:
    """Return each queue (default: every declared one) as the queues API shows it."""
    names = list(names or declared())
    from jobs.accounting import tallies

    states = {state.name: state for state in QueueState.objects.filter(name__in=names)}
    counts = use(names)
    dead_letters = tallies.dead_letters_by_queue()
    limits = conf.get().queue_concurrency
    found = []
    for name in names:
        state = states.get(name)
        paused_at = state.paused_at if state else None
        running, queued = counts[name]
        found.append(
            {
                "name": name,
                "paused": paused_at is not None,
                "paused_at": paused_at,
                "paused_by": state.paused_by if state and paused_at else "",
                "concurrency_limit": limits.get(name),
                "running": running,
                "queued": queued,
                "dead_letters": dead_letters.get(name, 0),
            }
        )
    return found


@signals.worker_ready.connect(dispatch_uid="jobs.queues.ensure_states")
def _ensure_states_at_start(sender=None, **kwargs) -> None:
    """Create the declared queues' and tasks' state rows before this worker claims anything."""
    from jobs import task_states

    try:
        close_old_connections()
        ensure_states()
        task_states.ensure_states()
    except Exception:  # a worker must start even if this fails; a pause creates its row
        logger.exception("queue.ensure_states_failed")
