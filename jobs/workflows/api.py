"""REST endpoints of workflows: one workflow with its nodes, and its cancel."""

from datetime import datetime

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status

from jobs.models import JobDependency, JobReason, JobStatus, Workflow
from jobs.workflows.state import WorkflowNotFound, counts_of, status_of, workflow_cancel
from project.access.auth import actor, require_scope
from project.access.models import TokenScope

router = Router(tags=["workflows"])
# A page of nodes; a workflow may hold up to CONVEYOR_WORKFLOW_MAX_NODES.
DEFAULT_NODES, MAX_NODES = 1000, 5000


class NodeOut(Schema):
    job_id: int
    task: str
    queue: str
    status: JobStatus
    reason: JobReason | str
    priority: int
    attempts: int
    max_attempts: int
    depends_on: list[int] = Field(description="the job ids this one waits for")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class WorkflowOut(Schema):
    id: int
    name: str
    status: str = Field(description="running, succeeded, failed or cancelled (from its nodes)")
    failure_rule: str = Field(description="fail: a failed job cancels its dependants; tolerate")
    node_count: int
    counts: dict[str, int] = Field(description="its jobs by status")
    created_at: datetime
    cancelled_at: datetime | None
    started_by: str = Field(description="what started it, as kind:id (deployment:12), or empty")
    nodes: list[NodeOut] = Field(description="its jobs, oldest first (a page: see next_after)")
    next_after: int | None = Field(description="pass as ?after= for the next page of nodes")


class NodePage(Schema):
    after: int | None = Field(None, ge=0, description="only nodes whose job id is greater")
    limit: int = Field(DEFAULT_NODES, ge=1, le=MAX_NODES)


def _workflow(workflow_id: int) -> Workflow:
    workflow = Workflow.objects.filter(pk=workflow_id).first()
    if workflow is None:
        raise WorkflowNotFound(f"workflow {workflow_id} does not exist")
    return workflow


def describe(workflow: Workflow, *, after: int | None = None, limit: int = DEFAULT_NODES) -> dict:
    """The workflow as the API answers it, with one page of nodes."""
    counts = counts_of(workflow)
    jobs = workflow.jobs.order_by("id")
    if after is not None:
        jobs = jobs.filter(pk__gt=after)
    page = list(jobs[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    depends: dict[int, list[int]] = {job.pk: [] for job in page}
    if page:
        edges = JobDependency.objects.filter(
            dependant_id__in=list(depends), workflow=workflow
        ).order_by("id")
        for dependant, dependency, range_start, range_end in edges.values_list(
            "dependant_id", "dependency_id", "range_start", "range_end"
        ):
            if range_end is None:
                depends[dependant].append(dependency)
                continue
            members = workflow.jobs.filter(pk__gte=range_start, pk__lte=range_end)
            depends[dependant] += members.order_by("id").values_list("id", flat=True)
    return {
        "id": workflow.pk,
        "name": workflow.name,
        "status": status_of(workflow, counts),
        "failure_rule": workflow.failure_rule,
        "node_count": workflow.node_count,
        "counts": counts,
        "created_at": workflow.created_at,
        "cancelled_at": workflow.cancelled_at,
        "started_by": workflow.started_by,
        "nodes": [
            {
                "job_id": job.pk,
                "task": job.task,
                "queue": job.queue,
                "status": job.status,
                "reason": job.reason,
                "priority": job.priority,
                "attempts": job.attempts,
                "max_attempts": job.max_attempts,
                "depends_on": depends[job.pk],
                "created_at": job.created_at,
                "started_at": job.started_at,
                "finished_at": job.finished_at,
            }
            for job in page
        ],
        "next_after": page[-1].pk if more else None,
    }


@router.get(
    "/workflows/{int:workflow_id}",
    response=WorkflowOut,
    summary="One workflow: its status and its jobs with what each waits for",
)
def get_workflow(request: HttpRequest, workflow_id: int, page: Query[NodePage]):
    require_scope(request, TokenScope.ADMIN, action="workflow.view")
    return describe(_workflow(workflow_id), after=page.after, limit=page.limit)


@router.post(
    "/workflows/{int:workflow_id}/cancel",
    response={202: WorkflowOut},
    summary="Cancel a workflow's unfinished jobs (running ones are asked; 409: all ended)",
)
def cancel_workflow(request: HttpRequest, workflow_id: int):
    require_scope(request, TokenScope.ADMIN, action="workflow.cancel")
    workflow = workflow_cancel(workflow_id, actor=actor(request))
    return Status(202, describe(workflow))
