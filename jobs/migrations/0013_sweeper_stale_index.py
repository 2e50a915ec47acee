"""The sweeper's last backoff step (rows re-sent five times or more) and its never-published
rows: a partial index of their own, built ``CONCURRENTLY`` on PostgreSQL."""

from django.db import migrations, models

from project.migration_operations import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0012_queue_state"),
    ]

    operations = [
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=models.Q(status__in=["queued", "retrying"])
                & (models.Q(publish_count__gte=5) | models.Q(published_at__isnull=True)),
                fields=["published_at"],
                name="job_pending_stale_idx",
            ),
        ),
    ]
