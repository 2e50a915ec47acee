"""Job counts and per-minute statistics, kept as rollups so no page counts the history."""

from django.db import models


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


class JobTally(models.Model):
    """A running total of one series of one queue and task (``jobs.accounting.tallies``).

    Series: ``dead_letters`` (dead jobs not superseded; ``bucket`` -1) and the cumulative
    histograms ``run_time`` and ``wait_time`` (``bucket`` the index of the first bound of
    ``jobs.accounting.tallies.BOUNDS`` the time is within, ``len(BOUNDS)`` above the last;
    ``total`` the seconds summed). Written only by ``jobs.accounting.tallies.fold``; the
    exact figure is this row plus the ``JobTallyDelta`` rows not folded yet.
    """

    series = models.CharField(max_length=32)
    queue = models.CharField(max_length=100)
    task = models.CharField(max_length=200)
    bucket = models.SmallIntegerField(default=-1)
    n = models.BigIntegerField(default=0)
    total = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["series", "queue", "task", "bucket"], name="job_tally_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.series} {self.queue}/{self.task}[{self.bucket}]: {self.n}"


class JobTallyDelta(models.Model):
    """A change to a ``JobTally``, appended by the database triggers on ``jobs_job``."""

    series = models.CharField(max_length=32)
    queue = models.CharField(max_length=100)
    task = models.CharField(max_length=200)
    bucket = models.SmallIntegerField(default=-1)
    n = models.BigIntegerField()
    total = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"{self.series} {self.queue}/{self.task}[{self.bucket}]: {self.n:+d}"


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
