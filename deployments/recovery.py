"""Recovery scoped to a deployment: retry the failures that followed it, in the background.

For deployment N of an environment, the failures that followed it are those that ended in
``[since, until)``: from N's finish to the finish of its *successor* — the next successful
deployment of the same project and environment — or, without one, to the moment the
operator confirmed. They are:

* every **dead job of the project** (a job whose payload names the project under
  ``"project"``, as deployments.health counts them) whose ``finished_at`` falls in the span;
* every **dead webhook delivery** of the project (its event's data names the project) whose
  last attempt falls in the span.

``recovery_count`` is the dry run: the counts, nothing written. ``recovery_create`` (one
transaction) writes a ``Recovery`` row with the span, the counts and the newest id of each
kind (nothing that failed later is touched), one ``deployment.recover`` AuditLog entry and
one ``deployments.recover`` job. That job runs ``recovery_run``: jobs first, then deliveries,
each walked by id after the row's cursor in batches of ``BATCH_SIZE``, one transaction per
batch, ``PAUSE_SECONDS`` apart (the pattern of jobs.bulk). Each job is retried through
``jobs.owners.job_retry`` and each delivery replayed through
``webhooks.services.delivery_replay`` — their owners' rules and audit entries, naming
``<actor> (recovery N)``. One an owner refuses (it was retried meanwhile, its endpoint is
disabled) counts as failed, with the first ``MAX_ERRORS`` reasons kept.
"""

import logging
import time
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from deployments.errors import NotRecoverable, RecoveryInProgress
from deployments.health import project_events_since, project_jobs
from deployments.models import Deployment, DeploymentStatus, Recovery, RecoveryStatus
from jobs import owners
from jobs.errors import IllegalTransition, JobNotFound
from jobs.models import AuditLog, JobStatus
from project.access.permissions import allowed
from webhooks.errors import WebhookError
from webhooks.models import Delivery, DeliveryStatus
from webhooks.services import delivery_replay

logger = logging.getLogger("deployments")

RECOVER_TASK = "deployments.recover"
BATCH_SIZE = 100
PAUSE_SECONDS = 0.5
MAX_ERRORS = 20
# The newest recoveries of one deployment the API lists.
MAX_LISTED = 50


@dataclass(frozen=True)
class Span:
    """The failures that followed a deployment: ``[since, until)`` and its successor."""

    since: datetime
    until: datetime
    successor: Deployment | None


def span_of(deployment: Deployment, *, now: datetime | None = None) -> Span:
    """Return the span after ``deployment``; NotRecoverable if it has not finished."""
    if deployment.finished_at is None:
        raise NotRecoverable(
            f"deployment {deployment.pk} has not finished ({deployment.status}): "
            "no failures follow it yet"
        )
    successor = (
        Deployment.objects.filter(
            project_id=deployment.project_id,
            environment=deployment.environment,
            status=DeploymentStatus.SUCCESS,
            finished_at__gt=deployment.finished_at,
        )
        .order_by("finished_at", "pk")
        .first()
    )
    until = successor.finished_at if successor else (now or timezone.now())
    return Span(since=deployment.finished_at, until=until, successor=successor)


def failed_jobs(slug: str, since: datetime, until: datetime):
    """The project's dead jobs that ended in ``[since, until)``."""
    return project_jobs(slug).filter(
        status=JobStatus.DEAD, finished_at__gte=since, finished_at__lt=until
    )


def dead_deliveries(slug: str, since: datetime, until: datetime):
    """The project's dead webhook deliveries whose last attempt was in ``[since, until)``."""
    return Delivery.objects.filter(
        status=DeliveryStatus.DEAD,
        last_attempt_at__gte=since,
        last_attempt_at__lt=until,
        event__in=project_events_since(slug, since),
    )


def recovery_count(deployment: Deployment) -> dict:
    """The dry run: what a recovery of ``deployment`` would retry now."""
    span = span_of(deployment)
    slug = deployment.project.slug
    return {
        "deployment_id": deployment.pk,
        "since": span.since,
        "until": span.until,
        "successor": span.successor.pk if span.successor else None,
        "jobs": failed_jobs(slug, span.since, span.until).count(),
        "deliveries": dead_deliveries(slug, span.since, span.until).count(),
    }


def recovery_create(deployment: Deployment, *, actor: str, user=None) -> Recovery:
    """Record a recovery of the failures after ``deployment`` and enqueue its one job."""
    from jobs import services

    span = span_of(deployment)
    slug = deployment.project.slug
    jobs = failed_jobs(slug, span.since, span.until).order_by()
    deliveries = dead_deliveries(slug, span.since, span.until).order_by()
    now = timezone.now()
    with transaction.atomic():
        # One recovery of a deployment at a time: a second ask (a double click, a retried
        # request) while one is queued or running is refused, naming it.
        Deployment.objects.select_for_update().filter(pk=deployment.pk).first()
        unfinished = (
            Recovery.objects.filter(deployment=deployment)
            .exclude(status=RecoveryStatus.DONE)
            .first()
        )
        if unfinished is not None:
            raise RecoveryInProgress(
                f"recovery {unfinished.pk} of deployment {deployment.pk} is still "
                f"{unfinished.status}; wait for it to finish"
            )
        recovery = Recovery.objects.create(
            deployment=deployment,
            actor=actor,
            user=user,
            since=span.since,
            until=span.until,
            successor=span.successor,
            jobs_total=jobs.count(),
            deliveries_total=deliveries.count(),
            max_job_id=jobs.order_by("-pk").values_list("pk", flat=True).first() or 0,
            max_delivery_id=deliveries.order_by("-pk").values_list("pk", flat=True).first() or 0,
            created_at=now,
            updated_at=now,
        )
        job = services.enqueue(RECOVER_TASK, {"recovery_id": recovery.pk}, queue="default")
        Recovery.objects.filter(pk=recovery.pk).update(job_id=job.pk)
        recovery.job_id = job.pk
        AuditLog.objects.create(
            actor=actor,
            action="deployment.recover",
            target_type="deployment",
            target_id=str(deployment.pk),
            details={
                "recovery_id": recovery.pk,
                "since": span.since.isoformat(),
                "until": span.until.isoformat(),
                "successor": recovery.successor_id,
                "jobs": recovery.jobs_total,
                "deliveries": recovery.deliveries_total,
                "job_id": job.pk,
            },
        )
    return recovery


def recovery_run(
    recovery_id: int,
    *,
    batch_size: int = BATCH_SIZE,
    pause: float = PAUSE_SECONDS,
    keep_going=lambda: True,
) -> Recovery:
    """Retry ``recovery_id``'s failures after its cursors, a batch at a time.

    A recovery asked for by a person who has since lost ``deployment.recover`` (or was
    deactivated) ends without retrying anything more, saying why.
    """
    asked = Recovery.objects.select_related("user").get(pk=recovery_id)
    lost = asked.user_id is not None and not allowed(asked.user, "deployment.recover")
    if asked.status != RecoveryStatus.DONE and lost:
        return _refuse(asked, f"{asked.actor} may no longer recover deployments")
    Recovery.objects.filter(pk=recovery_id, status=RecoveryStatus.QUEUED).update(
        status=RecoveryStatus.RUNNING, updated_at=timezone.now()
    )
    while True:
        last = _batch(recovery_id, batch_size)
        if last or not keep_going():
            break
        time.sleep(pause)
    recovery = Recovery.objects.get(pk=recovery_id)
    if last:
        logger.info(
            "deployment.recovery_finished",
            extra={
                "recovery_id": recovery.pk,
                "deployment_id": recovery.deployment_id,
                "done": recovery.done,
                "failed": recovery.failed,
            },
        )
    return recovery


def _refuse(recovery: Recovery, reason: str) -> Recovery:
    recovery.status = RecoveryStatus.DONE
    recovery.finished_at = recovery.updated_at = timezone.now()
    recovery.errors = [reason, *recovery.errors][:MAX_ERRORS]
    recovery.save(update_fields=["status", "finished_at", "updated_at", "errors"])
    return recovery


def _batch(recovery_id: int, batch_size: int) -> bool:
    """Act on one batch in one transaction; return True once nothing is left."""
    with transaction.atomic():
        recovery = (
            Recovery.objects.select_for_update(of=("self",))
            .select_related("deployment__project")
            .get(pk=recovery_id)
        )
        if recovery.status == RecoveryStatus.DONE:
            return True
        slug = recovery.deployment.project.slug
        actor = f"{recovery.actor} (recovery {recovery.pk})"
        jobs = list(
            failed_jobs(slug, recovery.since, recovery.until)
            .filter(pk__gt=recovery.last_job_id, pk__lte=recovery.max_job_id)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch_size]
        )
        done, errors = _retry_jobs(jobs, actor, recovery.user)
        deliveries = []
        if len(jobs) < batch_size:
            deliveries = list(
                dead_deliveries(slug, recovery.since, recovery.until)
                .filter(pk__gt=recovery.last_delivery_id, pk__lte=recovery.max_delivery_id)
                .order_by("pk")
                .values_list("pk", flat=True)[: batch_size - len(jobs)]
            )
        replayed, refused = _replay(deliveries, actor)
        if jobs:
            recovery.last_job_id = jobs[-1]
        if deliveries:
            recovery.last_delivery_id = deliveries[-1]
        recovery.done += done + replayed
        recovery.failed += len(jobs) - done + len(deliveries) - replayed
        recovery.errors = (recovery.errors + errors + refused)[:MAX_ERRORS]
        last = len(jobs) + len(deliveries) < batch_size
        recovery.status = RecoveryStatus.DONE if last else RecoveryStatus.RUNNING
        recovery.updated_at = timezone.now()
        recovery.finished_at = recovery.updated_at if last else None
        recovery.save()
    return last


def _retry_jobs(ids: list[int], actor: str, user) -> tuple[int, list[str]]:
    done, errors = 0, []
    for job_id in ids:
        try:
            with transaction.atomic():
                owners.job_retry(job_id, actor=actor, user=user)
            done += 1
        except (IllegalTransition, JobNotFound) as exc:
            errors.append(f"job {job_id}: {exc}")
    return done, errors


def _replay(ids: list[int], actor: str) -> tuple[int, list[str]]:
    done, errors = 0, []
    for delivery_id in ids:
        try:
            with transaction.atomic():
                delivery_replay(delivery_id=delivery_id, actor=actor)
            done += 1
        except WebhookError as exc:
            errors.append(f"delivery {delivery_id}: {exc}")
    return done, errors


def recovery_as_dict(recovery: Recovery) -> dict:
    return {
        "id": recovery.pk,
        "deployment_id": recovery.deployment_id,
        "status": recovery.status,
        "since": recovery.since,
        "until": recovery.until,
        "successor": recovery.successor_id,
        "jobs": recovery.jobs_total,
        "deliveries": recovery.deliveries_total,
        "total": recovery.total,
        "done": recovery.done,
        "failed": recovery.failed,
        "errors": recovery.errors,
        "job_id": recovery.job_id,
        "created_at": recovery.created_at,
        "finished_at": recovery.finished_at,
    }
