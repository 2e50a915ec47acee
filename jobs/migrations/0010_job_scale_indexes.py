"""Indexes for what is asked of the job table at scale; the old ones they replace go.

Built ``CONCURRENTLY`` on PostgreSQL (enqueue and claim keep running), new ones first.
"""

from django.db import migrations, models

from project.migration_operations import AddIndexOnline, RemoveIndexOnline

PENDING = models.Q(status__in=["queued", "retrying"])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0009_job_unique_key"),
    ]

    operations = [
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=PENDING,
                fields=["publish_count", "published_at"],
                name="job_pending_publish_idx",
            ),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(condition=PENDING, fields=["run_after"], name="job_pending_due_idx"),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=PENDING, fields=["queue", "run_after"], name="job_pending_queue_idx"
            ),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(fields=["status", "id"], name="job_status_idx"),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(fields=["queue", "status", "id"], name="job_queue_status_idx"),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(fields=["task", "status", "id"], name="job_task_status_idx"),
        ),
        # Replaced by the partial indexes on the runnable rows.
        RemoveIndexOnline(model_name="job", name="job_sweeper_idx"),
        # Replaced by (queue, status, id) and (task, status, id), which lead with the same.
        RemoveIndexOnline(model_name="job", name="job_queue_idx"),
        RemoveIndexOnline(model_name="job", name="job_task_idx"),
    ]
