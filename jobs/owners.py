"""The one hook through which an app that owns jobs tells the engine about them.

The engine imports no app. An app whose task's jobs belong to one of its rows (deployments
own ``deployments.run``, webhooks own ``webhooks.deliver``) registers, per task name, an
``Owner`` that:

* ``describe(jobs)`` — says, for a batch of jobs, which row owns each one, its status and
  where it is shown (for the Jobs list, the job page and the API);
* ``retry(job, actor, user)`` / ``cancel(job, actor)`` — carries out an operator's retry or
  cancel of the job through the owner's own rules (a deployment retry is a new deployment;
  a delivery retry is a replay), as ``actor`` for the person ``user`` (or None), returning
  the job that now does the work (and superseding, through ``jobs.services.job_supersede``, the
  dead job whose work it takes over) — or, when what the retry created has no job yet (a
  deployment waiting for approval), the ``OwnerInfo`` of what it created;
* ``failed_job_ids()`` — a queryset of ids of jobs whose owner failed, however the job
  itself ended (a deployment's job succeeds even when the deployment fails): the Jobs list's
  "owner failed" filter, and the minute rollup, which counts such a succeeded job as
  ``owner_failed`` (a failure in the throughput chart);
* ``jobs_of`` — ``{kind: id -> queryset of job ids}``: the jobs of one of its rows, for the
  Jobs list's "owned by" filter (``deployment:12``, ``endpoint:3``);
* ``dead_notice_topic`` — the topic of the staff notice its dead jobs send (a webhook
  delivery's is ``webhook.dead_letter``; ``job.dead`` otherwise).

``job_retry`` and ``job_cancel`` here are what operators' edges (admin, API) call: through
the owner when there is one, the plain engine services otherwise. The owners themselves
call ``jobs.services`` directly, never these, so nothing loops.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db.models import Q, QuerySet

from jobs import selectors, services
from jobs.errors import IllegalTransition
from jobs.models import Job


class OwnerRefused(IllegalTransition):
    """The owner's rules turned the retry or cancel down (e.g. a running deployment)."""


@dataclass(frozen=True)
class OwnerInfo:
    """What owns one job: a label such as ``deployment 12``, its status and its admin page."""

    kind: str
    id: int
    label: str
    status: str
    url: str = ""
    failed: bool = False
    api_path: str = ""  # where the API shows it, e.g. /api/v1/deployments/12


@dataclass(frozen=True)
class Owner:
    describe: Callable[[list[Job]], dict[int, OwnerInfo]]
    retry: Callable[[Job, str, object | None], "Job | OwnerInfo"]
    cancel: Callable[[Job, str], Job]
    failed_job_ids: Callable[[], QuerySet]
    # Shown on the Jobs page next to the buttons, e.g. "Retry creates a new deployment".
    notes: dict[str, str] = field(default_factory=dict)
    # The topic of the staff notice a dead job of the owner's task sends.
    dead_notice_topic: str = "job.dead"
    # {kind: id -> a queryset of the ids of that row's jobs}, e.g. {"endpoint": ...}.
    jobs_of: dict[str, Callable[[int], QuerySet]] = field(default_factory=dict)


_OWNERS: dict[str, Owner] = {}


def register(task: str, owner: Owner) -> None:
    """Declare that ``task``'s jobs are owned, and how (called from an app's ``ready()``)."""
    _OWNERS[task] = owner


def owner_of(task: str) -> Owner | None:
    return _OWNERS.get(task)


def describe(jobs: Iterable[Job]) -> dict[int, OwnerInfo]:
    """Return the owner of each job that has one, by job id (one query per owning app)."""
    by_task: dict[str, list[Job]] = {}
    for job in jobs:
        if job.task in _OWNERS:
            by_task.setdefault(job.task, []).append(job)
    found: dict[int, OwnerInfo] = {}
    for task, group in by_task.items():
        found.update(_OWNERS[task].describe(group))
    return found


def failed_owner_filter() -> Q:
    """Q matching jobs whose owner failed (for the Jobs list's "owner failed" filter)."""
    where = Q(pk__in=[])
    for task, owner in _OWNERS.items():
        where |= Q(task=task, pk__in=owner.failed_job_ids())
    return where


def kinds() -> list[str]:
    """Return the owner kinds the "owned by" filter knows (``deployment``, ``endpoint``, ...)."""
    return sorted({kind for owner in _OWNERS.values() for kind in owner.jobs_of})


def jobs_of(kind: str, row_id: int) -> Q | None:
    """Q matching the jobs of owner row ``kind:row_id``; None if no owner has that kind."""
    for task, owner in _OWNERS.items():
        if kind in owner.jobs_of:
            return Q(task=task, pk__in=owner.jobs_of[kind](row_id))
    return None


def job_retry(job_id: int, *, actor: str, user=None) -> Job | OwnerInfo:
    """Retry a job as an operator: through its owner if it has one.

    Returns the job now queued, or the OwnerInfo of what the owner created when that has
    no job yet (it waits for an approval, say): the retry happened either way.
    """
    job = selectors.job(job_id)
    owner = _OWNERS.get(job.task)
    if owner is None:
        return services.job_retry(job_id, actor=actor)
    return owner.retry(job, actor, user)


def job_cancel(job_id: int, *, actor: str) -> Job:
    """Cancel a job as an operator: through its owner if it has one."""
    job = selectors.job(job_id)
    owner = _OWNERS.get(job.task)
    if owner is None:
        return services.job_cancel(job_id, actor=actor)
    return owner.cancel(job, actor)
