"""What ran: a Deployment (its state machine), its StepRuns and its append-only log chunks."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from deployments.models.projects import EnvironmentNameField, Pipeline, Project
from deployments.models.workspaces import Worktree


class DeploymentStatus(models.TextChoices):
    # Written by create (and retry, rollback) for a protected environment: no job exists yet,
    # so it holds no lock and no worker. Left by the last approval needed (-> pending), a
    # rejection, the approval expiry (deployments.maintenance.approvals) or a cancel.
    WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
    # Written by create (and retry) or by the approval that releases it; left by the claim, a
    # cancel, a supersede or the dead-job handler.
    PENDING = "pending", "Pending"
    # Written by the claim; left by the runner when it ends, by a cancel request or by the
    # dead-job handler (worker lost).
    RUNNING = "running", "Running"
    # Written by a cancel request; left by the runner once the steps have stopped (or by the
    # dead-job handler).
    CANCELLING = "cancelling", "Cancelling"
    # Final.
    SUCCESS = "success", "Success"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


S = DeploymentStatus

# The one table of allowed moves; deployments.transitions.transition() enforces it.
# cancelling -> success: the cancel arrived after the last step had already succeeded.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.WAITING_APPROVAL: frozenset({S.PENDING, S.CANCELLED}),
    S.PENDING: frozenset({S.RUNNING, S.CANCELLED, S.FAILED}),
    S.RUNNING: frozenset({S.CANCELLING, S.SUCCESS, S.FAILED, S.CANCELLED}),
    S.CANCELLING: frozenset({S.SUCCESS, S.FAILED, S.CANCELLED}),
    S.SUCCESS: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}
FINISHED = frozenset({S.SUCCESS, S.FAILED, S.CANCELLED})
ACTIVE = frozenset({S.RUNNING, S.CANCELLING})
# Not started yet: a cancel ends these at once.
NOT_STARTED = frozenset({S.WAITING_APPROVAL, S.PENDING})


# Deployment.health["status"] (deployments.health): watching until the gate's window ends.
HEALTH_WATCHING = "watching"
HEALTH_HEALTHY = "healthy"
HEALTH_UNHEALTHY = "unhealthy"


class FailureReason(models.TextChoices):
    STEP_FAILED = "step_failed", "A step failed"
    TIMED_OUT = "timed_out", "Timed out"
    WORKER_LOST = "worker_lost", "Worker lost"
    WORKER_SHUTDOWN = "worker_shutdown", "Its worker shut down"
    GIT_ERROR = "git_error", "Git checkout failed"
    WORKDIR_ERROR = "workdir_error", "The working directory is not usable"
    INTERNAL_ERROR = "internal_error", "Internal error"
    JOB_LOST = "job_lost", "Its job was cancelled or lost before it ran"
    CANCELLED = "cancelled", "Cancelled"
    SUPERSEDED = "superseded", "Superseded by a newer deployment"
    REJECTED = "rejected", "An approver rejected it"
    APPROVAL_EXPIRED = "approval_expired", "Not approved in time"
    NO_DEPLOYER = "no_deployer", "No live deployer host has its project's runs_on tags"


class Deployment(models.Model):
    """One run of a pipeline's steps (as snapshotted at trigger time) for a ref and environment.

    A deployment runs at most once; a retry is a new Deployment with ``retry_of`` set.
    """

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="deployments")
    environment = EnvironmentNameField(max_length=64)
    ref = models.CharField(max_length=255)
    commit_sha = models.CharField(max_length=64, blank=True, default="")
    pipeline = models.ForeignKey(
        Pipeline, on_delete=models.SET_NULL, null=True, blank=True, related_name="deployments"
    )
    pipeline_name = models.CharField(max_length=64)
    params = models.JSONField(default=dict, blank=True)
    steps = models.JSONField(default=list, help_text="the pipeline's steps at trigger time")
    timeout = models.PositiveIntegerField(help_text="seconds, from the project at trigger time")
    status = models.CharField(
        max_length=16, choices=DeploymentStatus.choices, default=DeploymentStatus.PENDING
    )
    failure_reason = models.CharField(
        max_length=32, choices=FailureReason.choices, blank=True, default=""
    )
    error = models.TextField(blank=True, default="", help_text="what went wrong, for operators")
    waiting_for = models.CharField(
        max_length=300, blank=True, default="", help_text="what it waits for before it can run"
    )
    waiting_since = models.DateTimeField(null=True, blank=True)
    retry_of = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="retries"
    )
    attempt = models.PositiveIntegerField(default=1)
    rollback_of = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="rollbacks",
        help_text="the earlier deployment whose commit and steps this rollback deploys again",
    )
    undoes = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="undone_by",
        help_text="the environment's current deployment when this rollback was made",
    )
    committed_at = models.DateTimeField(
        null=True, blank=True, help_text="commit time of commit_sha, from git (lead time)"
    )
    triggered_by = models.CharField(max_length=200, default="system")
    triggered_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="the person behind the trigger, retry or rollback (a console user or "
        "the person a token belongs to)",
    )
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True, default="")
    job_id = models.BigIntegerField(null=True, blank=True, help_text="the jobs.Job running it")
    worker = models.CharField(max_length=200, blank=True, default="")
    worktree = models.ForeignKey(
        Worktree, on_delete=models.SET_NULL, null=True, blank=True, related_name="deployments"
    )
    project_dir = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Written by deployments.health only: {} (no gate), then {"status": "watching", ...},
    # then "healthy" or "unhealthy" with the figures that decided it.
    health = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]
        permissions = [
            ("run_deployment", "Can run a deployment again (retry)"),
            ("recover_deployment", "Can retry the failures that followed a deployment"),
            ("cancel_deployment", "Can cancel deployments"),
            ("approve_deployment", "Can approve or reject deployments waiting for approval"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="deployment_idempotency_unique",
            ),
            models.CheckConstraint(
                condition=Q(status__in=DeploymentStatus.values), name="deployment_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["project", "environment", "status"], name="deployment_policy_idx"),
            models.Index(fields=["status", "created_at"], name="deployment_status_idx"),
            models.Index(fields=["job_id"], name="deployment_job_idx"),
            models.Index(fields=["finished_at"], name="deployment_finished_idx"),
            models.Index(
                fields=["project", "environment", "finished_at"], name="deployment_history_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"Deployment {self.pk} ({self.environment}@{self.ref}) [{self.status}]"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def is_rollback(self) -> bool:
        return self.rollback_of_id is not None

    @property
    def is_unhealthy(self) -> bool:
        return (self.health or {}).get("status") == HEALTH_UNHEALTHY


class StepStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCESS = "success", "Success"
    FAILED = "failed", "Failed"
    TIMED_OUT = "timed_out", "Timed out"
    CANCELLED = "cancelled", "Cancelled"
    SKIPPED = "skipped", "Skipped"


class StepRun(models.Model):
    """How one snapshotted step of a deployment ran, and where its output lies in the log."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="step_runs")
    position = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=StepStatus.choices, default=StepStatus.PENDING)
    exit_code = models.IntegerField(null=True, blank=True, help_text="-N: killed by signal N")
    continue_on_error = models.BooleanField(default=False)
    log_start = models.BigIntegerField(null=True, blank=True)
    log_end = models.BigIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["deployment", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "position"], name="step_run_position_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id}#{self.position} {self.name} [{self.status}]"


class LogChunk(models.Model):
    """An append-only piece of a deployment's log: bytes at ``offset``, number ``sequence``.

    Chunks are at most 64 KiB, already masked, and never updated.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="log_chunks")
    step_run = models.ForeignKey(
        StepRun, on_delete=models.CASCADE, null=True, blank=True, related_name="log_chunks"
    )
    sequence = models.PositiveIntegerField()
    offset = models.BigIntegerField()
    size = models.PositiveIntegerField()
    data = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment", "sequence"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "sequence"], name="log_chunk_sequence_unique"
            )
        ]
        indexes = [models.Index(fields=["deployment", "offset"], name="log_chunk_offset_idx")]

    def __str__(self) -> str:
        return f"{self.deployment_id}:{self.sequence} @{self.offset}+{self.size}"


class DeploymentEvent(models.Model):
    """A moment in a deployment's life that no other row records (waiting behind another, released).

    The timeline (deployments.timeline) builds the rest from the deployment's own timestamps,
    its step runs, the AuditLog, its job and its webhook deliveries.
    """

    WAITING = "waiting"
    RELEASED = "released"  # approved enough: moved from waiting_approval to pending
    # runs_on: waiting for, or routed to, a deployer host with its tags (deployments.routing)
    WAITING_FOR_DEPLOYER = "waiting_for_deployer"

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=32)
    at = models.DateTimeField()
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["deployment", "at", "id"]
        indexes = [models.Index(fields=["deployment", "at"], name="deployment_event_idx")]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.kind} at {self.at:%H:%M:%S}"


class RecoveryStatus(models.TextChoices):
    # Written by deployments.recovery.recovery_create; left when its job runs a first batch.
    QUEUED = "queued", "Queued"
    # Written by the first batch; left by the last.
    RUNNING = "running", "Running"
    # Final: every failure counted at confirmation was processed.
    DONE = "done", "Done"


class Recovery(models.Model):
    """An operator's retry of the failures that followed one deployment (deployments.recovery).

    The failures are the project's dead jobs and dead webhook deliveries that ended in
    ``[since, until)``: from the deployment's finish to its successor's (or the
    confirmation). Walked by id up to ``max_job_id`` / ``max_delivery_id``, the cursors a
    killed run resumes after.
    """

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="recoveries")
    status = models.CharField(
        max_length=10, choices=RecoveryStatus.choices, default=RecoveryStatus.QUEUED
    )
    actor = models.CharField(max_length=200)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    since = models.DateTimeField()
    until = models.DateTimeField()
    successor = models.ForeignKey(
        Deployment, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    jobs_total = models.PositiveIntegerField(default=0)
    deliveries_total = models.PositiveIntegerField(default=0)
    max_job_id = models.BigIntegerField(default=0)
    max_delivery_id = models.BigIntegerField(default=0)
    last_job_id = models.BigIntegerField(default=0)
    last_delivery_id = models.BigIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "recoveries"

    def __str__(self) -> str:
        return f"Recovery {self.pk} of deployment {self.deployment_id} [{self.status}]"

    @property
    def total(self) -> int:
        return self.jobs_total + self.deliveries_total
