"""A range edge: one edge for a group's members (``JobDependency.range_end``), and the index
that finds the range holding an ended member. The edges table is small next to the jobs
table (one row per edge of an unpurged workflow): a plain build.

Unapplied, each range edge becomes one edge per member first (done where the member has
ended), so the code before it finds every dependency it waits for.
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
            "AND j.id > e.dependency_id AND j.id <= e.range_end WHERE e.range_end IS NOT NULL",
            FINISHED,
        )
        cursor.execute(
            f"UPDATE {edges} e SET range_end = NULL, done = e.done OR EXISTS (SELECT 1 "
            f"FROM {jobs} j WHERE j.id = e.dependency_id AND j.status IN (%s, %s, %s)) "
            "WHERE e.range_end IS NOT NULL",
            FINISHED,
        )


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
        migrations.RunPython(migrations.RunPython.noop, expand_ranges, elidable=False),
    ]
