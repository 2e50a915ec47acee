"""The engine's upkeep: maintenance runners' records and locks, and workers' heartbeats."""

from django.db import models


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
