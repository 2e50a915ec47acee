"""Concurrency per (project, environment): who runs, who waits, who is superseded.

Every decision is taken while holding the environment's ``EnvironmentLock`` row
(``SELECT ... FOR UPDATE``), both when a deployment is created and when a worker claims it,
so two workers never both conclude "nothing else runs here". Policies:

``queue``               one at a time, oldest first; the others wait.
``supersede``           at most one running and one pending: a newer deployment cancels the
                        older pending one (reason ``superseded``); the running one finishes.
``cancel_in_progress``  the newest cancels the pending ones and stops the running one
                        (reason ``superseded``), then runs once it has stopped.

A deployment that must wait is snoozed by its job (``jobs.Snooze``), which spends no attempt;
the deployment before it wakes it when it ends.
"""

import enum

from django.db.models import QuerySet

from deployments import lifecycle
from deployments.models import (
    ACTIVE,
    ConcurrencyPolicy,
    Deployment,
    DeploymentStatus,
    FailureReason,
)
from jobs.models import FINISHED as JOB_FINISHED
from jobs.models import Job

S = DeploymentStatus
ACTOR = "policy"


class Decision(enum.Enum):
    RUN = "run"
    WAIT = "wait"
    SUPERSEDED = "superseded"


def _neighbours(deployment: Deployment) -> QuerySet:
    return Deployment.objects.filter(
        project_id=deployment.project_id, environment=deployment.environment
    ).exclude(pk=deployment.pk)


def on_create(deployment: Deployment, policy: str) -> None:
    """Apply ``policy`` to the others when ``deployment`` is created (lock held)."""
    if policy == ConcurrencyPolicy.QUEUE:
        return
    _supersede_older_pending(deployment)
    if policy == ConcurrencyPolicy.CANCEL_IN_PROGRESS:
        _stop_running(deployment)


def admit(deployment: Deployment, policy: str) -> Decision:
    """Decide whether ``deployment`` runs now, waits, or was superseded (lock held)."""
    others = _neighbours(deployment)
    _fail_orphans(others.filter(status=S.PENDING, pk__lt=deployment.pk))
    if policy != ConcurrencyPolicy.QUEUE:
        newer = others.filter(pk__gt=deployment.pk, status__in=[S.PENDING, *ACTIVE])
        if newer.exists():
            return Decision.SUPERSEDED
        _supersede_older_pending(deployment)
    if policy == ConcurrencyPolicy.CANCEL_IN_PROGRESS:
        _stop_running(deployment)
    if others.filter(status__in=ACTIVE).exists():
        return Decision.WAIT
    if others.filter(status=S.PENDING, pk__lt=deployment.pk).exists():
        return Decision.WAIT
    return Decision.RUN


def blocker(deployment: Deployment) -> Deployment | None:
    """Return the deployment ``deployment`` waits behind: the running one, else the oldest
    older pending one (lock held)."""
    others = _neighbours(deployment)
    return (
        others.filter(status__in=ACTIVE).order_by("pk").first()
        or others.filter(status=S.PENDING, pk__lt=deployment.pk).order_by("pk").first()
    )


def _supersede_older_pending(deployment: Deployment) -> None:
    older = _neighbours(deployment).filter(status=S.PENDING, pk__lt=deployment.pk)
    for other in older.select_related("project"):
        lifecycle.cancel_pending(other, reason=FailureReason.SUPERSEDED, actor=ACTOR)


def _stop_running(deployment: Deployment) -> None:
    running = _neighbours(deployment).filter(status=S.RUNNING, pk__lt=deployment.pk)
    for other in running.select_related("project"):
        lifecycle.request_stop(other, reason=FailureReason.SUPERSEDED, actor=ACTOR)


def _fail_orphans(pending: QuerySet) -> None:
    """Fail pending deployments whose job ended without them (e.g. cancelled in jobs admin).

    Otherwise such a deployment would block its environment forever under ``queue``.
    """
    job_ids = dict(pending.filter(job_id__isnull=False).order_by().values_list("job_id", "pk"))
    if not job_ids:
        return
    live = Job.objects.filter(pk__in=list(job_ids)).exclude(status__in=JOB_FINISHED)
    for job_id in set(job_ids) - set(live.order_by().values_list("pk", flat=True)):
        lifecycle.fail_lost(
            job_ids[job_id], reason=FailureReason.JOB_LOST, error=f"job {job_id} ended first"
        )
