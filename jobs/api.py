"""REST endpoints of the job engine: the queue overview and jobs (admin scope)."""

from datetime import datetime
from typing import Literal

from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema, Status

from jobs import owners, queues, selectors, task_names, task_states
from jobs.attempts import history
from jobs.models import Job, JobReason, JobStatus
from project.access.auth import acting_user, actor, require_scope
from project.access.models import TokenScope
from project.api_errors import ApiError
from project.pagination import DEFAULT_LIMIT, MAX_LIMIT, paginate

router = Router(tags=["jobs"])


class AttemptError(Schema):
    class_path: str
    message: str
    traceback: str


class AttemptOut(Schema):
    attempt: int | None
    worker: str
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str
    reason: str
    error: AttemptError | None


class OwnerOut(Schema):
    kind: str
    id: int
    label: str
    status: str


class JobOut(Schema):
    id: int
    task: str
    queue: str
    status: JobStatus
    priority: int
    attempts: int
    max_attempts: int
    payload: dict
    result: object | None
    last_error: str
    reason: JobReason | Literal[""]
    attempts_history: list[AttemptOut]
    run_after: datetime
    lease_expires_at: datetime | None
    locked_by: str
    cancel_requested_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    superseded_at: datetime | None = Field(
        None,
        description="when a later job took over this dead job's work (its delivery replayed, "
        "its deployment retried): no longer a dead letter",
    )
    owner: OwnerOut | None = Field(None, description="the deployment or delivery it works for")
    workflow: int | None = Field(
        None, description="the workflow it is a node of (GET /api/v1/workflows/{id}), or null"
    )
    unique_key: str | None = Field(None, description="a unique job's key (a digest)")
    unique_states: list[JobStatus] = Field(description="the states it is unique among")
    unique_period_seconds: float | None = Field(
        None, description="the length of its uniqueness bucket; null: for ever"
    )

    @staticmethod
    def resolve_unique_states(job: Job) -> list[str]:
        return [state for state in job.unique_states.split(",") if state]

    @staticmethod
    def resolve_unique_period_seconds(job: Job) -> float | None:
        return job.unique_period.total_seconds() if job.unique_period else None

    @staticmethod
    def resolve_workflow(job: Job) -> int | None:
        return job.workflow_id

    @staticmethod
    def resolve_owner(job: Job) -> dict | None:
        info = owners.describe([job]).get(job.pk)
        return None if info is None else vars(info)

    @staticmethod
    def resolve_attempts_history(job: Job) -> list[dict]:
        return history(job)


class RetryCreatedOut(Schema):
    job: None = Field(None, description="no job yet: what the owner created waits")
    created: OwnerOut = Field(description="what the retry created, e.g. a deployment")


class RecentJob(Schema):
    id: int
    task: str
    queue: str
    status: JobStatus
    attempts: int
    max_attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str | None = None


class MaintenanceRunnerOut(Schema):
    runner: str
    enabled: bool
    interval_seconds: float | None
    last_run_at: datetime | None = Field(None, description="end of the last completed run")
    duration_ms: int | None
    counts: dict | None
    error: str | None
    overdue: bool = Field(description="no completed run within 3 intervals: is beat running?")


class QueueOut(Schema):
    paused_queues: list[str] = Field(description="queues paused now (see /queues)")
    paused_tasks: list[str] = Field(description="tasks paused now (see /tasks)")
    by_status: dict[str, int]
    by_queue: dict[str, dict[str, int]]
    by_task: dict[str, dict[str, int]]
    running: int
    oldest_queued_age_seconds: float | None
    recent: list[RecentJob]
    maintenance: list[MaintenanceRunnerOut]


class QueueStateOut(Schema):
    name: str
    paused: bool
    paused_at: datetime | None
    paused_by: str = Field(description="who paused it (empty unless paused)")
    concurrency_limit: int | None = Field(
        description="the most of its jobs running at once everywhere (CONVEYOR_QUEUE_CONCURRENCY)"
    )
    running: int
    queued: int = Field(description="queued or retrying jobs, due or not")
    dead_letters: int = Field(
        description="dead jobs not retried and not superseded by a replay or retry of their "
        "delivery or deployment (exact)"
    )


class JobFilters(Schema):
    status: JobStatus | None = None
    queue: str | None = Field(None, max_length=100)
    task: str | None = Field(None, max_length=200)
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    before: int | None = Field(None, ge=1)


@router.get(
    "/queue", response=QueueOut, summary="Job counts by status, queue and task; recent jobs"
)
def get_queue(request: HttpRequest):
    stats = selectors.queue_stats()
    if not request.auth.allows(TokenScope.ADMIN):  # error text may name other projects' data
        for job in stats["recent"]:
            job["last_error"] = None
        for runner in stats["maintenance"]:
            runner["error"] = runner["error"] and "(admin scope)"
    return stats


@router.get("/jobs", response=list[JobOut], summary="List jobs, newest first")
def list_jobs(request: HttpRequest, response: HttpResponse, filters: Query[JobFilters]):
    require_scope(request, TokenScope.ADMIN, action="job.view")
    jobs = Job.objects.all()
    for name in ("status", "queue"):
        value = getattr(filters, name)
        if value:
            jobs = jobs.filter(**{name: value})
    if filters.task:  # a task, or a django.tasks job's function path (jobs.task_names)
        jobs = jobs.filter(task_names.filter_by_name(filters.task))
    return paginate(request, response, jobs, limit=filters.limit, before=filters.before)


@router.get(
    "/jobs/{int:job_id}", response=JobOut, summary="One job: attempts, last error, timestamps"
)
def get_job(request: HttpRequest, job_id: int):
    require_scope(request, TokenScope.ADMIN, action="job.view")
    return selectors.job(job_id)


@router.post(
    "/jobs/{int:job_id}/retry",
    response={200: JobOut, 202: RetryCreatedOut},
    summary="Queue a dead or cancelled job again (through its deployment or delivery)",
    description="A job owned by a deployment retries the deployment (the new deployment's "
    "job is returned); one owned by a webhook delivery replays the delivery (its new job). "
    "When what the retry created has no job yet (a deployment waiting for approval): 202 "
    "with `created`, the new deployment, and `Location` pointing at it.",
)
def retry_job(request: HttpRequest, response: HttpResponse, job_id: int):
    require_scope(request, TokenScope.ADMIN, action="job.retry")
    result = owners.job_retry(job_id, actor=actor(request), user=acting_user(request))
    if isinstance(result, owners.OwnerInfo):
        if result.api_path:
            response["Location"] = result.api_path
        return Status(202, {"job": None, "created": vars(result)})
    return result


@router.post(
    "/jobs/{int:job_id}/cancel", response={202: JobOut}, summary="Cancel a job (running: ask it)"
)
def cancel_job(request: HttpRequest, job_id: int):
    require_scope(request, TokenScope.ADMIN, action="job.cancel")
    return Status(202, owners.job_cancel(job_id, actor=actor(request)))


@router.get("/queues", response=list[QueueStateOut], summary="Every declared queue: state and use")
def list_queues(request: HttpRequest):
    require_scope(request, TokenScope.ADMIN, action="job.view")
    return queues.describe()


def _pause_action(request: HttpRequest, name: str, action, permission: str) -> dict:
    """Pause or resume a queue or a task; 404 in the error shape for an unknown name."""
    require_scope(request, TokenScope.ADMIN, action=permission)
    try:
        return action(name, actor=actor(request))
    except (queues.UnknownQueue, task_states.UnknownTask) as exc:
        raise ApiError(404, "not_found", str(exc)) from None


@router.post(
    "/queues/{name}/pause",
    response=QueueStateOut,
    summary="Pause a queue: once this answers, none of its jobs is claimed; running ones finish",
)
def pause_queue(request: HttpRequest, name: str):
    return _pause_action(request, name, queues.pause, "queue.pause")


@router.post(
    "/queues/{name}/resume",
    response=QueueStateOut,
    summary="Resume a queue: its due jobs are rung for at once",
)
def resume_queue(request: HttpRequest, name: str):
    return _pause_action(request, name, queues.resume, "queue.pause")


class TaskLimitOut(Schema):
    concurrency: int | None = Field(description="the most running at once everywhere")
    key: list[str] | None = Field(description="the payload keys that make a job's limit key")
    key_concurrency: int | None = Field(description="the most running at once per key")
    rate: str | None = Field(description="the most starts in any window (N/s, N/m, N/h)")
    key_rate: str | None = Field(description="the same, per key")
    fair: bool = Field(description="whether keys are served round-robin")


class BusyKeyOut(Schema):
    key: str
    running: int


class TaskStateOut(Schema):
    name: str
    paused: bool
    paused_at: datetime | None
    paused_by: str = Field(description="who paused it (empty unless paused)")
    limit: TaskLimitOut | None = Field(description="the task's declared limit (jobs.limits)")
    running: int
    rate_full_until: datetime | None = Field(
        description="when the task's rate window next has room (null: it has room now)"
    )
    busiest_keys: list[BusyKeyOut] = Field(description="the keys with the most running jobs")
    keys_rate_held: int = Field(description="keys whose rate window is full now")


@router.get(
    "/tasks", response=list[TaskStateOut], summary="Limited or paused job tasks: state and use"
)
def list_tasks(request: HttpRequest):
    require_scope(request, TokenScope.ADMIN, action="job.view")
    return task_states.describe(busiest_keys=True)


@router.post(
    "/tasks/{name}/pause",
    response=TaskStateOut,
    summary="Pause a task in every queue: once this answers, none of its jobs is claimed",
)
def pause_task(request: HttpRequest, name: str):
    return _pause_action(request, name, task_states.pause, "task.pause")


@router.post(
    "/tasks/{name}/resume",
    response=TaskStateOut,
    summary="Resume a task: its due jobs are rung for at once",
)
def resume_task(request: HttpRequest, name: str):
    return _pause_action(request, name, task_states.resume, "task.pause")
