"""The Job row (the truth about every unit of background work), AuditLog and Notification."""

from django.conf import settings
from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Concat, StrIndex
from django.db.models.lookups import GreaterThan

from project.secret_fields import secret_fields


class JobStatus(models.TextChoices):
    # Written by enqueue and by an operator's retry; left by a worker's claim or a cancel.
    QUEUED = "queued", "Queued"
    # Written by the claim; left by complete, fail, snooze, cancel, the reaper or the
    # lost-worker handler.
    RUNNING = "running", "Running"
    # Waiting for its run_after after a failure or a snooze; left by a claim or a cancel.
    RETRYING = "retrying", "Retrying"
    # Final.
    SUCCEEDED = "succeeded", "Succeeded"
    # Attempts exhausted, Permanent error or worker lost too often; left only by an
    # operator's retry.
    DEAD = "dead", "Dead"
    # Cancelled before or during a run; left only by an operator's retry.
    CANCELLED = "cancelled", "Cancelled"


S = JobStatus

# The one table of allowed moves. jobs.transitions.transition() enforces it.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.RETRYING, S.DEAD, S.CANCELLED}),
    S.RETRYING: frozenset({S.RUNNING, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.DEAD: frozenset({S.QUEUED}),
    S.CANCELLED: frozenset({S.QUEUED}),
}
FINISHED = frozenset({S.SUCCEEDED, S.DEAD, S.CANCELLED})
# In the order of the partial indexes' conditions (status IN ('queued', 'retrying')): a query
# that spells the same list lets PostgreSQL drop the clause the index already holds.
PENDING = (S.QUEUED, S.RETRYING)
# The sweeper re-sends an unclaimed row at grace × 2^publish_count, doubling this many times
# at most (jobs.maintenance.sweeper); the rows past the last doubling have an index of their own.
MAX_BACKOFF_DOUBLINGS = 5

# A unique job holds its key while its status is among its own unique states (jobs.unique):
# strpos() on PostgreSQL, instr() on SQLite, both allowed in a partial index's condition.
UNIQUE_CONSTRAINT = "job_unique_key_live"
UNIQUE_LIVE = Q(unique_key__isnull=False) & Q(
    GreaterThan(StrIndex("unique_states", Concat(Value(","), "status", Value(","))), 0)
)


class JobReason(models.TextChoices):
    """Why a job is ``retrying``, ``dead`` or ``cancelled``: set by jobs.outcome, and only there.

    A failure on the job's last attempt ends it ``dead``: with ``exhausted`` after an
    ordinary error, otherwise with the failure's own reason (``worker_lost``, ``time_limit``,
    ``lease_expired``), so that an owner with one attempt (a deployment) knows what happened.
    """

    # Retrying: the body raised an error its task retries.
    ERROR = "error", "Error"
    # Dead: the body raised an error its task retries, on the last attempt.
    EXHAUSTED = "exhausted", "Attempts exhausted"
    # Dead: the body raised Permanent, or an error its task does not retry.
    PERMANENT = "permanent", "Permanent error"
    # Retrying or dead: the run went past its time limit.
    TIME_LIMIT = "time_limit", "Time limit"
    # Retrying or dead: the worker process died under the run (kill -9, OOM killer).
    WORKER_LOST = "worker_lost", "Worker lost"
    # Retrying or dead: the reaper found the run's lease expired (its whole worker is gone).
    LEASE_EXPIRED = "lease_expired", "Lease expired"
    # Retrying: the worker shut down gracefully before the run finished (no attempt spent).
    WORKER_SHUTDOWN = "worker_shutdown", "Worker shutdown"
    # Retrying: the body raised Snooze (no attempt spent).
    SNOOZED = "snoozed", "Snoozed"
    # Cancelled: by an operator, before or during a run.
    CANCELLED = "cancelled", "Cancelled"


class Job(models.Model):
    """One unit of background work, executed by a Celery task that receives only its id."""

    task = models.CharField(max_length=200, help_text="Celery task name")
    queue = models.CharField(max_length=100, default="default")
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    priority = models.SmallIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=5)
    run_after = models.DateTimeField()
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=200, blank=True, default="")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    # Set only for unique jobs (jobs.unique): the digest, the states it is unique among
    # (",queued,running,"), and the period of its bucket (None: for ever).
    unique_key = models.CharField(max_length=64, null=True, blank=True)
    unique_states = models.CharField(max_length=64, blank=True, default="")
    unique_period = models.DurationField(null=True, blank=True)
    # The job's limit key (jobs.limits): its task's ``Limit.key`` values, set at enqueue.
    limit_key = models.CharField(max_length=200, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    reason = models.CharField(max_length=20, choices=JobReason.choices, blank=True, default="")
    # One entry per finished attempt, oldest first (see jobs.attempts).
    attempts_history = models.JSONField(default=list, blank=True)
    result = models.JSONField(null=True, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    publish_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        permissions = [("retry_job", "Can retry jobs"), ("cancel_job", "Can cancel jobs")]
        constraints = [
            models.UniqueConstraint(
                fields=["idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_idempotency_key_unique",
            ),
            models.UniqueConstraint(
                fields=["unique_key"], condition=UNIQUE_LIVE, name=UNIQUE_CONSTRAINT
            ),
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="job_status_valid"
            ),
        ]
        # Each index costs every write of a row it holds: the partial ones hold only the
        # runnable rows (written by enqueue and retry, left by the claim).
        indexes = [
            # The reaper: running rows whose lease ran out.
            models.Index(fields=["status", "lease_expires_at"], name="job_reaper_idx"),
            # The sweeper's rows due for a re-send: one range per backoff step.
            models.Index(
                fields=["publish_count", "published_at"],
                condition=Q(status__in=["queued", "retrying"]),
                name="job_pending_publish_idx",
            ),
            # ... its last step, rows re-sent that often or more (a range on published_at
            # alone: one on publish_count would read every such row), and rows never published.
            models.Index(
                fields=["published_at"],
                condition=Q(status__in=["queued", "retrying"])
                & (Q(publish_count__gte=MAX_BACKOFF_DOUBLINGS) | Q(published_at__isnull=True)),
                name="job_pending_stale_idx",
            ),
            # The sweeper's soon-due scheduled rows; the oldest due row.
            models.Index(
                fields=["run_after"],
                condition=Q(status__in=["queued", "retrying"]),
                name="job_pending_due_idx",
            ),
            # Per queue: the oldest queued row, the runnable rows.
            models.Index(
                fields=["queue", "run_after"],
                condition=Q(status__in=["queued", "retrying"]),
                name="job_pending_queue_idx",
            ),
            # The purge: one final status, oldest finished first.
            models.Index(fields=["status", "finished_at"], name="job_purge_idx"),
            # Lists filtered by status (and by queue or task), newest first; counts by them.
            models.Index(fields=["status", "id"], name="job_status_idx"),
            models.Index(fields=["queue", "status", "id"], name="job_queue_status_idx"),
            models.Index(fields=["task", "status", "id"], name="job_task_status_idx"),
            # The claim's pick (jobs.statements): runnable rows only, in the order it takes
            # them, so its cost does not grow with finished history.
            models.Index(
                fields=["queue", "task", "-priority", "run_after", "id"],
                condition=Q(status__in=["queued", "retrying"]),
                name="job_runnable_idx",
            ),
            # A queue's running count, for its concurrency limit and the queues API.
            models.Index(fields=["queue"], condition=Q(status="running"), name="job_running_idx"),
            # A limited task's running count, per key (jobs.limiter).
            models.Index(
                fields=["task", "limit_key"],
                condition=Q(status="running"),
                name="job_running_key_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"Job {self.pk} {self.task} [{self.status}]"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED


class AuditLog(models.Model):
    """An operator action or a dead letter: who did what to which object, and when."""

    actor = models.CharField(max_length=200, help_text="username, token name or 'system'")
    action = models.CharField(max_length=100)
    target_type = models.CharField(max_length=100)
    target_id = models.CharField(max_length=100)
    details = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target_idx")]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target_type}:{self.target_id}"


class Notification(models.Model):
    """An in-app notice in a user's inbox (dead letters, prune warnings, ...)."""

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    topic = models.CharField(max_length=100)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["recipient", "read_at"], name="notification_inbox_idx")]

    def __str__(self) -> str:
        return f"{self.topic}: {self.title}"


class TokenScope(models.TextChoices):
    READ = "read", "Read: a project's deployments and logs"
    DEPLOY = "deploy", "Deploy: also trigger, retry and cancel"
    ADMIN = "admin", "Admin: every project, jobs and webhooks"


SCOPE_RANK = {TokenScope.READ: 1, TokenScope.DEPLOY: 2, TokenScope.ADMIN: 3}


@secret_fields("token_hash")
class ApiToken(models.Model):
    """A bearer token for the REST API, stored only as a SHA-256 hash plus a short prefix."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True, help_text="identifies the token")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    scope = models.CharField(max_length=10, choices=TokenScope.choices, default=TokenScope.READ)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="the person this token acts for (approvals need one); deactivating them "
        "stops the token",
    )
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"
        permissions = [
            ("revoke_apitoken", "Can revoke API tokens"),
            ("grant_admin_token", "Can create admin-scope API tokens or raise a token to admin"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {self.scope})"

    def allows(self, scope: str) -> bool:
        return SCOPE_RANK[self.scope] >= SCOPE_RANK[scope]


class IdempotencyKey(models.Model):
    """An ``Idempotency-Key`` seen on a POST: its request fingerprint and stored response."""

    key = models.CharField(max_length=200)
    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="+")
    path = models.CharField(max_length=300)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["token", "path", "key"], name="idempotency_key_unique")
        ]

    def __str__(self) -> str:
        return f"{self.key} {self.path}"

    @property
    def in_flight(self) -> bool:
        return self.status_code is None


class MaintenanceRun(models.Model):
    """One completed pass of a maintenance runner: when, how long, its counts or its error.

    Written by ``jobs.maintenance.runs`` after every run (skipped runs are only logged);
    rows older than ``CONVEYOR_MAINTENANCE_RETENTION`` go, except each runner's latest.
    """

    runner = models.CharField(max_length=100, help_text="e.g. reap_jobs, purge_webhooks")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    counts = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    host = models.CharField(max_length=200, blank=True, default="", help_text="host:pid")

    class Meta:
        ordering = ["-finished_at", "-id"]
        indexes = [models.Index(fields=["runner", "finished_at"], name="maintenance_run_idx")]

    def __str__(self) -> str:
        return f"{self.runner} at {self.finished_at:%Y-%m-%d %H:%M:%S}"


class MaintenanceLock(models.Model):
    """A runner's lock on databases without advisory locks (SQLite): held until ``expires_at``.

    PostgreSQL uses ``pg_try_advisory_lock`` instead, released with the session.
    """

    runner = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200, blank=True, default="")
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.runner} held by {self.holder or 'nobody'} until {self.expires_at}"


class WorkerHeartbeat(models.Model):
    """One Celery worker as it reports itself every few seconds (see jobs.worker_registry).

    Written only by the worker it describes; a row not refreshed within three intervals is a
    worker that is gone (killed, or its host lost). Rows gone for a day are deleted by the
    next heartbeat of any worker.
    """

    name = models.CharField(max_length=200, unique=True, help_text="hostname/pid")
    hostname = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list, blank=True)
    pool = models.CharField(max_length=50, blank=True, default="")
    concurrency = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["hostname", "pid"]

    def __str__(self) -> str:
        return self.name


class JobCount(models.Model):
    """How many jobs of one queue, task and status exist, as of the last fold.

    Written only by ``jobs.accounting.counts.fold``; the exact figure is this row plus the
    ``JobCountDelta`` rows not folded yet (``jobs.accounting.counts.read`` adds both).
    """

    queue = models.CharField(max_length=100)
    task = models.CharField(max_length=200)
    status = models.CharField(max_length=16)
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "task", "status"], name="job_count_key")
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.task}/{self.status}: {self.n}"


class JobCountDelta(models.Model):
    """A change to a ``JobCount``, appended by the database triggers on ``jobs_job``.

    Append-only (no writer waits on another's row); ``fold`` moves them into the totals.
    """

    queue = models.CharField(max_length=100)
    task = models.CharField(max_length=200)
    status = models.CharField(max_length=16)
    n = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.queue}/{self.task}/{self.status}: {self.n:+d}"


class JobMinuteStats(models.Model):
    """Jobs of one queue and task that ended in one minute with one status (a rollup).

    Recomputed from ``jobs_job`` for the last few minutes by ``jobs.accounting.rollup``; the
    bucket lists count jobs per run-time and wait-time bucket (``RUN_TIME_BOUNDS`` /
    ``WAIT_TIME_BOUNDS`` there, the last entry for "above the last bound").
    """

    minute = models.DateTimeField()
    queue = models.CharField(max_length=100)
    task = models.CharField(max_length=200)
    status = models.CharField(max_length=16)
    count = models.PositiveIntegerField(default=0)
    run_time_buckets = models.JSONField(default=list)
    run_time_sum = models.FloatField(default=0.0)
    run_time_max = models.FloatField(default=0.0)
    wait_time_buckets = models.JSONField(default=list)
    wait_time_sum = models.FloatField(default=0.0)
    wait_time_max = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "queue", "task", "status"], name="job_minute_stats_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.queue}/{self.task} {self.status}: {self.count}"


class QueueState(models.Model):
    """A queue's operator state: paused or not (jobs.queues). No row: never paused.

    The claim reads a queue's row in the same statement that takes a job (jobs.statements),
    and a pause locks it, so once a pause has returned no claim anywhere starts a job of it.
    """

    name = models.CharField(max_length=100, primary_key=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=200, blank=True, default="")
    # When a claim was last refused for the queue's concurrency limit (None: none since the
    # last run's end found nothing held): a run's end rings only then (jobs.limiter.wake).
    held_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        permissions = [("pause_queue", "Can pause and resume queues")]

    def __str__(self) -> str:
        return f"{self.name} ({'paused' if self.paused_at else 'running'})"


class TaskState(models.Model):
    """A task's operator state and the state of its limits (jobs.task_states, jobs.limiter).

    No row: never paused, nothing started under a rate. A pause locks the row that every
    claim of the task reads (a limited task's claim locks it outright, so its claims take
    turns); ``starts`` are the task's latest start times (epoch seconds, at most its rate's
    count) and ``full_until`` when its rate window next has room (None: it has room);
    ``held_at`` when a claim was last refused for its concurrency (jobs.limiter.wake).
    """

    name = models.CharField(max_length=200, primary_key=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=200, blank=True, default="")
    starts = models.JSONField(default=list, blank=True)
    full_until = models.DateTimeField(null=True, blank=True)
    held_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        permissions = [("pause_task", "Can pause and resume tasks")]

    def __str__(self) -> str:
        return f"{self.name} ({'paused' if self.paused_at else 'running'})"


class LimitKeyState(models.Model):
    """One limit key of a limited task: its latest starts, for a per-key rate and fairness.

    Written only by jobs.limiter, under its task's state row lock; rows idle for a day are
    deleted by the purge.
    """

    task = models.CharField(max_length=200)
    key = models.CharField(max_length=200)
    starts = models.JSONField(default=list, blank=True)
    full_until = models.DateTimeField(null=True, blank=True)
    last_started_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "key"], name="limit_key_state_key"),
        ]
        indexes = [models.Index(fields=["last_started_at"], name="limit_key_idle_idx")]

    def __str__(self) -> str:
        return f"{self.task} [{self.key}]"


class BulkAction(models.TextChoices):
    RETRY = "retry", "Retry"
    CANCEL = "cancel", "Cancel"
    DELETE = "delete", "Delete"


class BulkStatus(models.TextChoices):
    # Written by jobs.bulk.bulk_create; left when its job first runs a batch.
    QUEUED = "queued", "Queued"
    # Written by the bulk job's first batch; left by its last batch.
    RUNNING = "running", "Running"
    # Final: every matching job up to ``max_id`` was processed.
    DONE = "done", "Done"


class BulkOperation(models.Model):
    """An operator's retry, cancel or delete of every job matching a Jobs list filter.

    Written by ``jobs.bulk``: created with its one ``jobs.bulk_operate`` job, then advanced a
    batch at a time; ``last_id`` is the cursor a killed run resumes after.
    """

    action = models.CharField(max_length=10, choices=BulkAction.choices)
    status = models.CharField(max_length=10, choices=BulkStatus.choices, default=BulkStatus.QUEUED)
    # The Jobs list's query string, ``{key: [values]}``, and how it reads to a person.
    filters = models.JSONField(default=dict, blank=True)
    description = models.TextField(blank=True, default="")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=200)
    # Only jobs up to this id (the newest matching at confirmation) are processed.
    max_id = models.BigIntegerField(default=0)
    last_id = models.BigIntegerField(default=0, help_text="the last job id processed")
    total = models.PositiveIntegerField(default=0, help_text="matching at confirmation")
    total_is_estimate = models.BooleanField(default=False)
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    # The first few refusals, e.g. "cannot retry job 12: it is queued".
    errors = models.JSONField(default=list, blank=True)
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"Bulk {self.action} {self.pk} [{self.status}]"
