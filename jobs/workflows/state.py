"""A workflow as read and as operated: its status, its nodes, its cancel."""

from bisect import bisect_left, bisect_right

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, ProtectedError, Q
from django.utils import timezone

from jobs.errors import IllegalTransition, JobNotFound
from jobs.models import (
    FINISHED,
    PENDING,
    UNFINISHED,
    AuditLog,
    Job,
    JobDependency,
    JobReason,
    JobStatus,
    Workflow,
)
from jobs.services.base import logger
from jobs.transitions import transition, update_returning

S = JobStatus


class WorkflowStatus:
    """A workflow's status, derived from its nodes when read (no row written per end)."""

    RUNNING = "running"  # some node has not ended
    SUCCEEDED = "succeeded"  # every node succeeded
    FAILED = "failed"  # every node ended, and some did not succeed
    CANCELLED = "cancelled"  # cancelled as a whole (jobs.workflows.workflow_cancel)
    # Every node left has succeeded, but some were purged: whether they had is not known.
    PURGED = "purged"


class WorkflowNotFound(JobNotFound):
    """No workflow has this id."""


def counts_of(workflow: Workflow) -> dict[str, int]:
    """Return ``{status: jobs}`` of ``workflow``'s nodes (the partial index on workflow)."""
    rows = Job.objects.filter(workflow=workflow).order_by().values("status").annotate(n=Count("id"))
    return {row["status"]: row["n"] for row in rows}


def status_of(workflow: Workflow, counts: dict[str, int] | None = None) -> str:
    """``workflow``'s status from its nodes' ``counts`` (``counts_of``). A callback cancelled
    as not needed (its condition did not hold, nothing failed) is no failure."""
    counts = counts_of(workflow) if counts is None else counts
    unfinished = sum(n for status, n in counts.items() if status not in FINISHED)
    if workflow.cancelled_at is not None:
        return WorkflowStatus.CANCELLED if not unfinished else WorkflowStatus.RUNNING
    if unfinished:
        return WorkflowStatus.RUNNING
    if counts.get(S.DEAD) or (counts.get(S.CANCELLED) and _cancelled_by_failure(workflow)):
        return WorkflowStatus.FAILED
    if sum(counts.values()) < workflow.node_count:
        return WorkflowStatus.PURGED
    return WorkflowStatus.SUCCEEDED


def _cancelled_by_failure(workflow: Workflow) -> bool:
    return (
        Job.objects.filter(workflow=workflow, status=S.CANCELLED)
        .exclude(reason=JobReason.NOT_NEEDED)
        .exists()
    )


# What the console's page of a workflow shows of each node: not its payload, result or
# history, which a 20,000-node workflow would load in full.
NODE_FIELDS = (
    "id",
    "task",
    "status",
    "reason",
    "attempts",
    "max_attempts",
    "started_at",
    "finished_at",
    "workflow_id",
)


def nodes_of(workflow: Workflow) -> tuple[list[Job], list[tuple[int, int, bool]]]:
    """Return the workflow's jobs (oldest first, ``NODE_FIELDS`` only) and its edges
    ``(dependant, dependency, done)``, found through its jobs (the index on each); a range
    edge as one edge per member, done once the member has ended."""
    jobs = list(Job.objects.filter(workflow=workflow).order_by("id").only(*NODE_FIELDS))
    rows = (
        JobDependency.objects.filter(dependant__workflow=workflow)
        .order_by("id")
        .values_list("dependant_id", "dependency_id", "done", "range_start", "range_end")
    )
    ids = [job.pk for job in jobs]
    edges: list[tuple[int, int, bool]] = []
    for dependant, dependency, done, range_start, range_end in rows:
        if range_end is None:
            edges.append((dependant, dependency, done))
            continue
        members = jobs[bisect_left(ids, range_start) : bisect_right(ids, range_end)]
        edges.extend((dependant, job.pk, done or job.status in FINISHED) for job in members)
    return jobs, edges


def workflow_cancel(workflow_id: int, *, actor: str) -> Workflow:
    """Cancel what has not finished: waiting and queued nodes at once, running ones asked.

    A running node ends cancelled through its lease keeper or heartbeat, as any job does;
    its end advances nothing left to run (its dependants are cancelled already).
    """
    with transaction.atomic():
        workflow = Workflow.objects.select_for_update().filter(pk=workflow_id).first()
        if workflow is None:
            raise WorkflowNotFound(f"workflow {workflow_id} does not exist")
        now = timezone.now()
        where = {"workflow_id": workflow_id}
        # Its unfinished jobs' rows first, in id order: a worker ending a node locks the
        # node's row before its dependants' (ids follow the dependency order), so taking
        # the waiting ones first and then the running ones could deadlock with it.
        list(
            Job.objects.select_for_update(no_key=True)
            .filter(status__in=[S.WAITING, *PENDING, S.RUNNING], **where)
            .order_by("id")
            .values_list("id", flat=True)
        )
        cancelled = transition(
            Q(**where),
            S.CANCELLED,
            from_=[S.WAITING, *PENDING],
            reason=JobReason.CANCELLED,
            last_error=f"the workflow was cancelled by {actor}",
        )
        asked = update_returning(
            Job.objects.filter(status=S.RUNNING, cancel_requested_at__isnull=True, **where),
            {"cancel_requested_at": now, "updated_at": now},
        )
        if not cancelled and not asked:  # every node has ended: nothing to cancel
            raise IllegalTransition(
                f"workflow {workflow_id} has nothing left to cancel: every job of it has ended"
            )
        if workflow.cancelled_at is None:
            workflow.cancelled_at = now
            workflow.save(update_fields=["cancelled_at"])
        # Every node not running is cancelled now: their edges are done, nothing is left
        # waiting to release (one UPDATE, not one advance per node). A range edge is left as
        # it is: its dependant is cancelled, and what its members' ends show is read from
        # their statuses (``nodes_of``).
        JobDependency.objects.filter(
            dependant__workflow_id=workflow_id, done=False, range_end__isnull=True
        ).exclude(dependency__status=S.RUNNING).update(done=True)
        AuditLog.objects.create(
            actor=actor,
            action="workflow.cancel",
            target_type="workflow",
            target_id=str(workflow_id),
            details={"cancelled": len(cancelled), "cancel_requested": len(asked)},
        )
        logger.info(
            "workflow.cancelled",
            extra={
                "workflow": workflow_id,
                "actor": actor,
                "cancelled": len(cancelled),
                "cancel_requested": len(asked),
            },
        )
    return workflow


def running_jobs():
    """The unfinished jobs of the outer query's workflow (for an ``Exists``), on the index of
    workflows' unfinished and dead jobs."""
    return Job.objects.filter(workflow_id=OuterRef("pk"), status__in=UNFINISHED)


def running_among(workflow_ids) -> set[int]:
    """Those of ``workflow_ids`` with a job that has not ended."""
    return set(
        Job.objects.filter(workflow_id__in=workflow_ids, status__in=UNFINISHED)
        .values_list("workflow_id", flat=True)
        .distinct()
    )


def outside_running_workflows() -> Q:
    """The jobs a bulk delete (and the purge of dead jobs) may take: those on their own, and
    those of a workflow every job of which has ended. A workflow still running keeps its
    finished jobs: their outcomes are what its callbacks get under ``"members"``."""
    return _outside_workflows_with(UNFINISHED)


def outside_workflows_kept_whole() -> Q:
    """The succeeded and cancelled jobs the purge may take: as ``outside_running_workflows``,
    and not those of a workflow with a dead job either (kept for the dead retention): a retry
    of it resumes the workflow, its dependants waiting again, with every outcome there."""
    return _outside_workflows_with((S.DEAD, *UNFINISHED))


def _outside_workflows_with(statuses) -> Q:
    """Jobs on their own, or of a workflow with no job in ``statuses``: for each row of a
    workflow, one probe of the index of workflows' unfinished and dead jobs
    (``job_workflow_open_idx``), never a read of all of them (a 20,000-node group waiting
    would be read again by every purge batch, and past the hash memory for every row)."""
    kept = Job.objects.filter(
        # A range of one value, not "=": PostgreSQL hashes an "=" subquery's whole answer
        # once a statement when it expects that to fit in memory (every batch would read a
        # waiting 20,000-node group whole); a range stays one index probe per row.
        workflow_id__gte=OuterRef("workflow_id"),
        workflow_id__lte=OuterRef("workflow_id"),
        status__in=statuses,
    )
    return Q(workflow__isnull=True) | ~Exists(kept)


def refuse_deleting_a_workflow_with_jobs(sender, instance: Workflow, **kwargs) -> None:
    """``pre_delete`` of a Workflow: refused while any job of it is left, as the purge does.
    One that has not ended would wait for good (its edges are the workflow's); one that has
    would leave the workflow, and a callback's outcomes would enter the payload index
    (jobs.payload_search). The row is locked first, so an operator's retry (which holds it
    shared) cannot bring a job back meanwhile."""
    Workflow.objects.select_for_update().filter(pk=instance.pk).exists()
    if running_among([instance.pk]):
        why = "has jobs that have not ended: cancel it, and let its running jobs end, first"
    elif Job.objects.filter(workflow_id=instance.pk).exists():
        why = "still has its jobs: delete them first (the purge deletes it after its last)"
    else:
        return
    raise ProtectedError(f"workflow {instance.pk} {why}", set())
