"""Tallies kept by triggers (jobs.accounting.tallies): dead letters and job-time histograms.

Installing the triggers rebuilds the dead letters from their partial index (0018), in the
same transaction.
"""

from django.db import migrations, models


def install_triggers(apps, schema_editor):
    from jobs.accounting import triggers

    triggers.install(schema_editor.connection)


def uninstall_tally_triggers(apps, schema_editor):
    from jobs.accounting import triggers

    postgresql = schema_editor.connection.vendor == "postgresql"
    with schema_editor.connection.cursor() as cursor:
        for name in triggers.TALLY_TRIGGERS:
            if postgresql:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON jobs_job")
                cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")
            else:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0018_job_superseded_and_dead_letter_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobTally",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("series", models.CharField(max_length=32)),
                ("queue", models.CharField(max_length=100)),
                ("task", models.CharField(max_length=200)),
                ("bucket", models.SmallIntegerField(default=-1)),
                ("n", models.BigIntegerField(default=0)),
                ("total", models.FloatField(default=0.0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("series", "queue", "task", "bucket"), name="job_tally_key")
                ],
            },
        ),
        migrations.CreateModel(
            name="JobTallyDelta",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("series", models.CharField(max_length=32)),
                ("queue", models.CharField(max_length=100)),
                ("task", models.CharField(max_length=200)),
                ("bucket", models.SmallIntegerField(default=-1)),
                ("n", models.BigIntegerField()),
                ("total", models.FloatField(default=0.0)),
            ],
        ),
        migrations.RunPython(install_triggers, uninstall_tally_triggers),
    ]
