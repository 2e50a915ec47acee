"""Schedules as the database keeps them, and the record of each slot fired or run by hand."""

from datetime import timedelta

from django.db import models

from project.env import format_duration


class Schedule(models.Model):
    """One declared schedule, reconciled from code and settings by ``setup_periodic_tasks``.

    The definition (task, cron or every, zone, payload, queue, priority, missed policy,
    enabled) belongs to the code and is rewritten by every reconcile; ``paused_*`` belongs to
    the operator and survives it. ``next_slot`` is the first slot not yet fired: the tick
    (``maintenance.fire_schedules``) looks only at rows whose ``next_slot`` has come, and moves
    it on in the transaction that fires the slots, holding the row's lock.
    """

    name = models.CharField(max_length=100, unique=True)
    task = models.CharField(max_length=200, help_text="Celery task name or django.tasks path")
    django_task = models.BooleanField(default=False)
    cron = models.CharField(max_length=200, blank=True, default="")
    every_seconds = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    payload = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=100, blank=True, default="")
    priority = models.SmallIntegerField(default=0)
    missed = models.CharField(max_length=8, default="last")
    missed_cap = models.PositiveIntegerField(default=10)
    enabled = models.BooleanField(default=True, help_text="as the code declares it")
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, blank=True, default="")
    next_slot = models.DateTimeField(null=True, blank=True)
    last_slot = models.DateTimeField(null=True, blank=True)
    last_missed_at = models.DateTimeField(null=True, blank=True)
    last_missed = models.JSONField(default=dict, blank=True)  # policy, missed, fired, slots
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["next_slot"], name="schedule_next_slot_idx")]
        permissions = [
            ("pause_schedule", "Can pause and resume schedules"),
            ("run_schedule", "Can run a schedule now"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def when(self) -> str:
        if self.cron:
            return f"cron {self.cron} ({self.timezone})"
        return f"every {format_duration(timedelta(seconds=self.every_seconds or 0))}"


class ScheduleRunKind(models.TextChoices):
    SLOT = "slot", "slot"
    MANUAL = "manual", "run now"


SLOT_UNIQUE = "schedule_run_one_per_slot"


class ScheduleRun(models.Model):
    """One job a schedule made: for a slot (at most one per slot, by the index) or by hand."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(max_length=8, choices=ScheduleRunKind.choices)
    slot = models.DateTimeField(help_text="the slot (UTC); for a run by hand, when asked")
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL)
    requested_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-slot", "-id"]
        indexes = [models.Index(fields=["schedule", "slot"], name="schedule_run_slot_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "slot"],
                condition=models.Q(kind="slot"),
                name=SLOT_UNIQUE,
            )
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} {self.kind} {self.slot:%Y-%m-%d %H:%M:%S}"
