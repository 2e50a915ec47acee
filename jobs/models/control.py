"""Operators' and limits' hold on claims: queue and task state, per-key limit state."""

from django.db import models


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
