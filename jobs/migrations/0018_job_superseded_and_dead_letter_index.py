"""A dead job can be superseded (``superseded_at``); the dead letters (dead, not superseded)
get a partial index of their own, built ``CONCURRENTLY`` on PostgreSQL."""

from django.db import migrations, models

from project.migration_operations import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0017_job_payload_path_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="superseded_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=models.Q(status="dead", superseded_at__isnull=True),
                fields=["queue", "id"],
                name="job_dead_letter_idx",
            ),
        ),
    ]
