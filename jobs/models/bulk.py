"""An operator's retry, cancel or delete of every job a Jobs list filter matches."""

from django.conf import settings
from django.db import models


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
