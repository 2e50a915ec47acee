"""A range edge: one edge for a group's members (``JobDependency.range_start`` and
``range_end``, no ``dependency``), and the index that finds the range holding an ended
member. The edges table is small next to the jobs table (one row per edge of an unpurged
workflow): a plain build.

Unapplied, each range edge becomes one edge per member first (done where the member has
ended), in the members' order, so the code before it finds every dependency it waits for.
"""

from django.db import migrations, models

FINISHED = ("cancelled", "dead", "succeeded")


def expand_ranges(apps, schema_editor):
    edge = apps.get_model("jobs", "JobDependency")
    job = apps.get_model("jobs", "Job")
    edges, jobs = edge._meta.db_table, job._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {edges} (workflow_id, dependant_id, dependency_id, condition, done) "
            "SELECT e.workflow_id, e.dependant_id, j.id, e.condition, "
            "e.done OR j.status IN (%s, %s, %s) "
            f"FROM {edges} e JOIN {jobs} j ON j.workflow_id = e.workflow_id "
            "AND j.id >= e.range_start AND j.id <= e.range_end WHERE e.range_end IS NOT NULL "
            "ORDER BY e.id, j.id",
            FINISHED,
        )
        cursor.execute(f"DELETE FROM {edges} WHERE range_end IS NOT NULL")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0029_kept_workflow_index")]

    operations = [
        migrations.AddField(
            model_name="jobdependency",
            name="range_start",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="jobdependency",
            name="range_end",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="jobdependency",
            name="dependency",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=models.deletion.CASCADE,
                related_name="+",
                to="jobs.job",
            ),
        ),
        migrations.AddIndex(
            model_name="jobdependency",
            index=models.Index(
                condition=models.Q(range_end__isnull=False),
                fields=["workflow", "range_end"],
                name="job_dep_range_idx",
            ),
        ),
        migrations.RunPython(migrations.RunPython.noop, expand_ranges, elidable=False),
    ]
