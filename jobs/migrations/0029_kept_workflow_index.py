"""An index of the workflows a purge keeps whole: their unfinished and dead jobs'
``(workflow_id, status)``, which a purge batch (and a bulk delete) probes once per expired
row of a workflow to keep such a workflow's finished jobs (jobs.workflows.state).

On PostgreSQL it is built ``CONCURRENTLY``: enqueue, claim and ends keep writing while it
builds. A build that failed half-way leaves an invalid index of that name, which ``IF NOT
EXISTS`` would take for built: it is dropped and built again. Elsewhere (SQLite), the index
as Django writes it.
"""

from django.db import migrations, models

NAME = "job_kept_workflow_idx"
INDEX = models.Index(
    fields=["workflow", "status"],
    condition=models.Q(
        workflow__isnull=False,
        status__in=("dead", "queued", "retrying", "running", "waiting"),
    ),
    name=NAME,
)


def _valid(schema_editor) -> bool | None:
    """Whether the index is built and usable (None: there is none)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
            [NAME],
        )
        row = cursor.fetchone()
    return None if row is None else row[0]


def forward(apps, schema_editor):
    job = apps.get_model("jobs", "Job")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.add_index(job, INDEX)
        return
    if _valid(schema_editor) is False:  # a build that failed half-way
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
    if _valid(schema_editor) is None:
        schema_editor.add_index(job, INDEX, concurrently=True)
    if not _valid(schema_editor):
        raise RuntimeError(f"index {NAME} was not built; run the migration again")


def backward(apps, schema_editor):
    job = apps.get_model("jobs", "Job")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
    else:
        schema_editor.remove_index(job, INDEX)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0028_payload_search_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
            state_operations=[migrations.AddIndex(model_name="job", index=INDEX)],
        )
    ]
