"""Bulk retry, cancel and delete of every job matching a Jobs list filter, in the background.

An operator filters the Jobs list, presses "Retry all matching" (or cancel, or delete),
confirms a page that shows how many match, and ``bulk_create`` writes, in one transaction:

* a ``BulkOperation`` row: the action, the list's filters (its query string), who asked,
  the count shown (exact up to ``jobs.changelist.EXACT_COUNT_CAP`` = 10,000 rows, beyond
  that PostgreSQL's estimate, "about N") and ``max_id``, the newest matching job's id;
* one ``AuditLog`` entry (``job.bulk_retry`` / ``job.bulk_cancel`` / ``job.bulk_delete``)
  naming who, which filter (a payload filter's value shown as ``***``) and how many;
* one ``jobs.bulk_operate`` job, which runs ``bulk_run``.

``bulk_run`` walks the matching jobs by id (keyset pagination: ``id > last_id AND id <=
max_id ORDER BY id LIMIT BATCH_SIZE``), the filter applied again to each batch, so a job
that stopped matching meanwhile is left alone and no job enqueued after the confirmation is
touched. Each batch is one transaction that locks the operation's row, acts on each job
and moves ``last_id``, ``done`` and ``failed`` on: a worker killed mid-batch loses the whole
batch, and the job's next attempt starts after the last committed one, so no job is acted
on twice. Between batches it pauses ``PAUSE_SECONDS``; it stops when a batch comes back short.

* **retry** (dead or cancelled jobs) and **cancel** (unfinished jobs) go through
  ``jobs.owners``: a deployment's job is retried as a new deployment, a delivery's replayed,
  each job's own ``job.retry`` / ``job.cancel`` audit entry naming ``<user> (bulk N)``.
  A job an owner refuses counts as failed, with the first ``MAX_ERRORS`` reasons kept.
* **delete** removes finished jobs only (succeeded, dead, cancelled), a batch at a time,
  but not those of a workflow still running (their outcomes are its callbacks' inputs): they
  count as failed, with the reason. A batch's jobs are locked as they are chosen, so a job
  retried meanwhile is either kept (the retry came first: failed, "retried meanwhile") or
  its retry finds it gone.

The filter is the Jobs list's own: ``matching`` rebuilds it through the admin's ChangeList
as the operator, so "everything matching" means what the list showed, and a filter the
operator may not use (a payload filter without the right to see payloads) is refused.
Each action needs the permission of the single action (``project.access.permissions``); the bulk job
itself (``BULK_TASK``) never matches.
"""

import logging
import time

from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db import models, transaction
from django.db.models.deletion import get_candidate_relations_to_delete
from django.test import RequestFactory
from django.utils import timezone

from jobs import owners, services
from jobs.changelist import NOT_FILTERS, ApproximateCount, capped_count
from jobs.errors import IllegalTransition, JobNotFound
from jobs.models import FINISHED, AuditLog, BulkAction, BulkOperation, BulkStatus, Job, JobStatus
from jobs.workflows.state import outside_running_workflows
from project.access.permissions import allowed

logger = logging.getLogger("jobs")

BULK_TASK = "jobs.bulk_operate"
# A batch is one transaction holding its jobs' row locks: 100 retries take well under a second.
BATCH_SIZE = 100
# Between batches, so workers, the claim and the web pages keep their share of the database.
PAUSE_SECONDS = 0.5
MAX_ERRORS = 20

PERMISSION = {
    BulkAction.RETRY: "job.retry",
    BulkAction.CANCEL: "job.cancel",
    BulkAction.DELETE: "job.delete",
}
# The jobs each action can move: the rest of a filter's matches are not counted or touched.
ACTION_STATUSES = {
    BulkAction.RETRY: (JobStatus.DEAD, JobStatus.CANCELLED),
    BulkAction.CANCEL: tuple(s for s in JobStatus if s not in FINISHED),
    BulkAction.DELETE: tuple(FINISHED),
}
LIST_PATH = "/admin/jobs/job/"


def filter_params(query) -> dict[str, list[str]]:
    """Return the filters of a Jobs list query string (``QueryDict``), without paging keys."""
    return {
        key: [value for value in values if value != ""]
        for key, values in query.lists()
        if key not in NOT_FILTERS and any(value != "" for value in values)
    }


def describe_filters(filters: dict[str, list[str]], *, hide_payload: bool = False) -> str:
    """Return ``filters`` as a person reads them: ``status__exact=dead, payload=a.b=***``."""
    parts = []
    for key, values in sorted(filters.items()):
        for value in values:
            if hide_payload and key == "payload":
                value = value.partition("=")[0] + "=***"
            parts.append(f"{key}={value}")
    return ", ".join(parts) or "no filter: every job"


def matching(action: str, filters: dict[str, list[str]], user):
    """Return the jobs ``action`` would act on: the Jobs list's queryset for ``filters``.

    Raises what the list raises for a filter it refuses (``IncorrectLookupParameters``,
    ``DisallowedModelAdminLookup``).
    """
    from django.contrib import admin

    # The list reads its filters from a GET request as a user: the worker builds one.
    request = RequestFactory().get(LIST_PATH, filters)
    request.user = user
    model_admin = admin.site._registry[Job]
    changelist = model_admin.get_changelist_instance(request)
    queryset = changelist.get_queryset(request)
    return queryset.exclude(task=BULK_TASK).filter(status__in=ACTION_STATUSES[action])


def count_matching(queryset) -> int:
    """Exact up to EXACT_COUNT_CAP, an ``ApproximateCount`` beyond (as the list counts)."""
    return capped_count(queryset)


def _require(user, action: str) -> None:
    if not (allowed(user, PERMISSION[action]) and user.has_perm("jobs.view_job")):
        raise PermissionDenied(f"{user} may not {action} jobs")


def bulk_create(*, action: str, filters: dict[str, list[str]], user) -> BulkOperation:
    """Record a bulk ``action`` over the jobs matching ``filters``; enqueue its one job."""
    _require(user, action)
    queryset = matching(action, filters, user)
    total = count_matching(queryset)
    max_id = queryset.order_by("-pk").values_list("pk", flat=True).first() or 0
    now = timezone.now()
    with transaction.atomic():
        operation = BulkOperation.objects.create(
            action=action,
            filters=filters,
            # Payload values hidden: the operations list is not only for those who see payloads.
            description=describe_filters(filters, hide_payload=True),
            user=user,
            actor=user.get_username(),
            max_id=max_id,
            total=int(total),
            total_is_estimate=isinstance(total, ApproximateCount),
            created_at=now,
            updated_at=now,
        )
        job = services.enqueue(BULK_TASK, {"operation_id": operation.pk})
        BulkOperation.objects.filter(pk=operation.pk).update(job_id=job.pk)
        operation.job_id = job.pk
        AuditLog.objects.create(
            actor=operation.actor,
            action=f"job.bulk_{action}",
            target_type="bulk_operation",
            target_id=str(operation.pk),
            details={
                "filter": describe_filters(filters, hide_payload=True),
                "matching": int(total),
                "estimate": operation.total_is_estimate,
                "job_id": job.pk,
            },
        )
    return operation


def bulk_run(
    operation_id: int,
    *,
    batch_size: int = BATCH_SIZE,
    pause: float = PAUSE_SECONDS,
    keep_going=lambda: True,
) -> BulkOperation:
    """Process ``operation_id``'s matching jobs after its ``last_id``, a batch at a time."""
    operation = BulkOperation.objects.select_related("user").get(pk=operation_id)
    if operation.status == BulkStatus.DONE:
        return operation
    user = operation.user
    if user is None or not (
        allowed(user, PERMISSION[operation.action]) and user.has_perm("jobs.view_job")
    ):
        return _finish(operation, refused=f"{operation.actor} may no longer do this")
    try:
        queryset = matching(operation.action, operation.filters, user)
    except (IncorrectLookupParameters, DisallowedModelAdminLookup) as exc:
        return _finish(operation, refused=f"the filter is refused now: {exc}")
    BulkOperation.objects.filter(pk=operation_id, started_at__isnull=True).update(
        started_at=timezone.now(), status=BulkStatus.RUNNING
    )
    while True:
        short = _batch(operation_id, queryset, user, batch_size)
        if short or not keep_going():
            break
        time.sleep(pause)
    operation.refresh_from_db()
    if short:
        _log_finished(operation)
    return operation


def _batch(operation_id: int, queryset, user, batch_size: int) -> bool:
    """Act on one batch in one transaction; return True if it was the last (short) one."""
    with transaction.atomic():
        operation = BulkOperation.objects.select_for_update().get(pk=operation_id)
        if operation.status == BulkStatus.DONE:  # a run the reaper thought lost finished it
            return True
        ids = list(
            queryset.filter(pk__gt=operation.last_id, pk__lte=operation.max_id)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch_size]
        )
        done, errors = _act(operation, ids, user)
        if ids:
            operation.last_id = ids[-1]
        operation.done += done
        operation.failed += len(ids) - done
        operation.errors = (operation.errors + errors)[:MAX_ERRORS]
        last = len(ids) < batch_size
        # The last batch's counts and "done" are one write: no page shows one without the other.
        operation.status = BulkStatus.DONE if last else BulkStatus.RUNNING
        operation.updated_at = timezone.now()
        operation.finished_at = operation.updated_at if last else None
        operation.save(
            update_fields=[
                "last_id",
                "done",
                "failed",
                "errors",
                "status",
                "updated_at",
                "finished_at",
            ]
        )
    return last


def _act(operation: BulkOperation, ids: list[int], user) -> tuple[int, list[str]]:
    """Apply the operation to ``ids``; return how many it moved and why others were refused."""
    if operation.action == BulkAction.DELETE:
        return _delete(ids)
    actor = f"{operation.actor} (bulk {operation.pk})"
    done, errors = 0, []
    for job_id in ids:
        try:
            with transaction.atomic():
                if operation.action == BulkAction.RETRY:
                    owners.job_retry(job_id, actor=actor, user=user)
                else:
                    owners.job_cancel(job_id, actor=actor)
            done += 1
        except (IllegalTransition, JobNotFound) as exc:
            errors.append(str(exc))
    return done, errors


def _delete(ids: list[int]) -> tuple[int, list[str]]:
    """Delete the finished jobs of ``ids`` that no running workflow needs; return how many,
    and why each of the others is left.

    They are locked as they are chosen, until the batch's transaction (``_batch``) commits:
    Django's delete reads the rows, then deletes them by id, and a retry in between would
    have queued a job that was then deleted. A retry now waits for the batch and finds its
    job gone; one that came first kept its job, no longer finished.

    The rows that point at them and that the delete sets to NULL (a webhook delivery's, a
    schedule run's) are locked first, as Django's delete writes them first and as their
    owners take them (a delivery's replay locks the delivery, then its job): taken the
    other way round, a replay during the batch deadlocked with it.
    """
    with transaction.atomic():  # the batch's own (select_for_update needs one)
        for relation in get_candidate_relations_to_delete(Job._meta):
            if relation.on_delete is models.SET_NULL:
                pointing = relation.related_model._base_manager.filter(
                    **{f"{relation.field.name}__in": ids}
                )
                list(pointing.order_by("pk").select_for_update(of=("self",)).values("pk"))
        chosen = list(
            Job.objects.filter(pk__in=ids, status__in=FINISHED)
            .filter(outside_running_workflows())
            .order_by("pk")
            .select_for_update(of=("self",))
            .values_list("pk", flat=True)
        )
        deleted = Job.objects.filter(pk__in=chosen).delete()[1].get(Job._meta.label, 0)
    # Read after the delete: what it left, whatever changed in between.
    rows = Job.objects.filter(pk__in=ids).values_list("pk", "status", "workflow_id")
    left = {pk: (status, workflow) for pk, status, workflow in rows}
    reasons, gone = [], set(chosen)
    for pk in ids:
        if pk in gone:
            continue
        if pk not in left:
            reasons.append(f"job {pk} was deleted meanwhile")
        elif left[pk][0] not in FINISHED:
            reasons.append(f"job {pk} is kept: it is {left[pk][0]} now (retried meanwhile)")
        else:
            reasons.append(f"job {pk} is kept: workflow {left[pk][1]} has not ended")
    return deleted, reasons


def _finish(operation: BulkOperation, *, refused: str) -> BulkOperation:
    """End ``operation`` without acting on anything more, saying why."""
    operation.status = BulkStatus.DONE
    operation.finished_at = operation.updated_at = timezone.now()
    operation.errors = [refused, *operation.errors][:MAX_ERRORS]
    operation.save(update_fields=["status", "finished_at", "updated_at", "errors"])
    _log_finished(operation, refused=True)
    return operation


def _log_finished(operation: BulkOperation, *, refused: bool = False) -> None:
    logger.info(
        "job.bulk_finished",
        extra={
            "operation_id": operation.pk,
            "action": operation.action,
            "done": operation.done,
            "failed": operation.failed,
            "refused": refused,
        },
    )
