"""A range edge: one edge for a group's members (``JobDependency.range_end``), and the index
that finds the range holding an ended member. The edges table is small next to the jobs
table (one row per edge of an unpurged workflow): a plain build."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0029_kept_workflow_index")]

    operations = [
        migrations.AddField(
            model_name="jobdependency",
            name="range_end",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="jobdependency",
            index=models.Index(
                condition=models.Q(range_end__isnull=False),
                fields=["workflow", "range_end"],
                name="job_dep_range_idx",
            ),
        ),
    ]
