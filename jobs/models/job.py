"""The Job row, the truth about every unit of background work: its states, reasons and moves."""

from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Concat, StrIndex
from django.db.models.lookups import GreaterThan


class JobStatus(models.TextChoices):
    # A workflow's job waiting for its dependencies (jobs.workflows): no claim takes it. Left
    # when its last dependency ends (released: queued; or cancelled by the failure rule) or
    # by a cancel. Never written by enqueue() itself.
    WAITING = "waiting", "Waiting"
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
    S.WAITING: frozenset({S.QUEUED, S.CANCELLED}),
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED}),
    # running → queued: a claimed run handed back before its body started (jobs.batches)
    S.RUNNING: frozenset({S.QUEUED, S.SUCCEEDED, S.RETRYING, S.DEAD, S.CANCELLED}),
    S.RETRYING: frozenset({S.RUNNING, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.DEAD: frozenset({S.QUEUED}),
    # A dependant cancelled because a dependency died waits again when that one is retried.
    S.CANCELLED: frozenset({S.QUEUED, S.WAITING}),
}
FINISHED = frozenset({S.SUCCEEDED, S.DEAD, S.CANCELLED})
# Every other status, in the order of the running workflows' index condition (see PENDING).
UNFINISHED = tuple(sorted(set(S.values) - FINISHED))
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


# A dead letter: a dead job no later job took over (jobs.services.job_supersede).
DEAD_LETTER = Q(status="dead", superseded_at__isnull=True)


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
    # Cancelled: a workflow's job whose dependencies did not end as it requires (a
    # dependency died under the "fail" rule); waits again if that dependency is retried.
    UPSTREAM = "upstream", "A dependency did not succeed"
    # Cancelled: a workflow's callback whose condition did not hold though nothing failed
    # (an "on failure" callback when every dependency succeeded): not a failure.
    NOT_NEEDED = "not_needed", "Not needed"


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
    # A dead job whose work was taken over (its delivery replayed, its deployment retried):
    # no longer a dead letter. Set by jobs.services.job_supersede, cleared by a retry.
    superseded_at = models.DateTimeField(null=True, blank=True)
    # The workflow it is a node of (jobs.workflows), or None for a job on its own. No
    # constraint in the database: a node is written only with its workflow, in the same
    # transaction (jobs.workflows.build), and the deferred check of every node's key ran at
    # the enqueue's COMMIT, once per node (a 1,000-member chord's commit: 6–17 ms, against
    # about 1 ms without). Deletes follow ``on_delete`` in Django and in the purge
    # (project.batch_delete), not in the database.
    workflow = models.ForeignKey(
        "jobs.Workflow",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="jobs",
        db_constraint=False,
        db_index=False,  # the partial index below: jobs outside workflows pay nothing
    )

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
            # The dead letters (dead, not superseded): the Jobs list's filter, the tally's
            # rebuild (jobs.accounting.tallies).
            models.Index(
                fields=["queue", "id"],
                condition=DEAD_LETTER,
                name="job_dead_letter_idx",
            ),
            # A workflow's nodes (its page, its status, its cancel, the jobs list's filter).
            models.Index(
                fields=["workflow", "id"],
                condition=Q(workflow__isnull=False),
                name="job_workflow_idx",
            ),
            # Workflows' unfinished and dead jobs only, as many rows as such jobs, however
            # long the history (migration 0031 builds it): the workflows a purge keeps whole
            # (a purge of dead jobs asks the unfinished only), and whether a range of a
            # group's members has one left (jobs.workflows.release).
            models.Index(
                fields=["workflow", "id", "status"],
                condition=Q(workflow__isnull=False, status__in=(S.DEAD, *UNFINISHED)),
                name="job_workflow_open_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"Job {self.pk} {self.task} [{self.status}]"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED
