"""A workflow's nodes and edges: no constraint on their key to the workflow in the database.

Django's constraints are checked at COMMIT, one lookup (and share lock) of the workflow's
row per node and per edge: 2,001 of them for a 1,000-member chord, 6–17 ms of its
enqueue's commit. Nodes and edges are written only with their workflow, in one transaction
(jobs.workflows.build); deletes follow the models' ``on_delete`` in Django and in the purge
(project.batch_delete), as for the edges' keys to jobs (0024).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0025_workflow_started_by"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="workflow",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="jobs",
                to="jobs.workflow",
            ),
        ),
        migrations.AlterField(
            model_name="jobdependency",
            name="workflow",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="edges",
                to="jobs.workflow",
            ),
        ),
    ]
