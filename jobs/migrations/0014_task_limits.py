"""Task limits and pauses: a limit key on each job, a state row per task and per limit key;
the running-per-key index built ``CONCURRENTLY`` on PostgreSQL."""

from django.db import migrations, models

from project.migration_operations import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0013_sweeper_stale_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="LimitKeyState",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("task", models.CharField(max_length=200)),
                ("key", models.CharField(max_length=200)),
                ("starts", models.JSONField(blank=True, default=list)),
                ("full_until", models.DateTimeField(blank=True, null=True)),
                ("last_started_at", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="TaskState",
            fields=[
                ("name", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("paused_by", models.CharField(blank=True, default="", max_length=200)),
                ("starts", models.JSONField(blank=True, default=list)),
                ("full_until", models.DateTimeField(blank=True, null=True)),
                ("updated_at", models.DateTimeField()),
            ],
            options={
                "ordering": ["name"],
                "permissions": [("pause_task", "Can pause and resume tasks")],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="limit_key",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        AddIndexOnline(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status", "running")),
                fields=["task", "limit_key"],
                name="job_running_key_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="limitkeystate",
            index=models.Index(fields=["last_started_at"], name="limit_key_idle_idx"),
        ),
        migrations.AddConstraint(
            model_name="limitkeystate",
            constraint=models.UniqueConstraint(fields=("task", "key"), name="limit_key_state_key"),
        ),
    ]
