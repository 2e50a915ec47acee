"""Workflow edges: no constraints to jobs in the database, no indexes repeating others.

A constraint's check ran for each edge of an enqueued workflow (two lookups of job rows,
each taking a share lock on it), costing more than the insert itself. The purge's batch
DELETE deletes a purged job's edges in its own statement (project.batch_delete follows
the models' CASCADE), as Django's delete does; the edges' indexes on (dependency,
dependant) and (dependant, id) already serve lookups by either column.
"""

import django.db.models.deletion
from django.db import migrations, models

COLUMNS = ("dependant_id", "dependency_id")


def drop_constraints(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for column in COLUMNS:
        schema_editor.execute(
            f"ALTER TABLE jobs_jobdependency DROP CONSTRAINT IF EXISTS jobs_jobdependency_{column}_fk"
        )


def add_constraints(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for column in COLUMNS:
        schema_editor.execute(
            f"ALTER TABLE jobs_jobdependency ADD CONSTRAINT jobs_jobdependency_{column}_fk "
            f"FOREIGN KEY ({column}) REFERENCES jobs_job (id) ON DELETE CASCADE"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0023_workflows"),
    ]

    operations = [
        migrations.RunPython(drop_constraints, add_constraints, elidable=False),
        migrations.AlterField(
            model_name="jobdependency",
            name="dependant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="jobs.job",
            ),
        ),
        migrations.AlterField(
            model_name="jobdependency",
            name="dependency",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="jobs.job",
            ),
        ),
    ]
