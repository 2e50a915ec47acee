"""The index of workflows' unfinished and dead jobs gains their ids: ``(workflow_id, id,
status)``, so whether a range of a group's members has one left reads that range's entries
only (jobs.workflows.release), as well as what a purge keeps (jobs.workflows.state). It
replaces ``job_kept_workflow_idx`` (``(workflow_id, status)``).

On PostgreSQL both are done ``CONCURRENTLY``: enqueue, claim and ends keep writing
meanwhile, and the old index serves the purge until the new one is built. A build that
failed half-way leaves an invalid index of the new name, which ``IF NOT EXISTS`` would take
for built: it is dropped and built again. Elsewhere (SQLite), the indexes as Django writes
them.
"""

from django.db import migrations, models

OLD = models.Index(
    fields=["workflow", "status"],
    condition=models.Q(
        workflow__isnull=False,
        status__in=("dead", "queued", "retrying", "running", "waiting"),
    ),
    name="job_kept_workflow_idx",
)
NEW = models.Index(
    fields=["workflow", "id", "status"],
    condition=models.Q(
        workflow__isnull=False,
        status__in=("dead", "queued", "retrying", "running", "waiting"),
    ),
    name="job_workflow_open_idx",
)


def _valid(schema_editor, name: str) -> bool | None:
    """Whether the index is built and usable (None: there is none)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name]
        )
        row = cursor.fetchone()
    return None if row is None else row[0]


def _build(schema_editor, model, index) -> None:
    if _valid(schema_editor, index.name) is False:  # a build that failed half-way
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}")
    if _valid(schema_editor, index.name) is None:
        schema_editor.add_index(model, index, concurrently=True)
    if not _valid(schema_editor, index.name):
        raise RuntimeError(f"index {index.name} was not built; run the migration again")


def _replace(apps, schema_editor, old: models.Index, new: models.Index) -> None:
    job = apps.get_model("jobs", "Job")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.add_index(job, new)
        schema_editor.remove_index(job, old)
        return
    _build(schema_editor, job, new)
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {old.name}")


def forward(apps, schema_editor):
    _replace(apps, schema_editor, OLD, NEW)


def backward(apps, schema_editor):
    _replace(apps, schema_editor, NEW, OLD)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0030_range_edges")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
            state_operations=[
                migrations.RemoveIndex(model_name="job", name=OLD.name),
                migrations.AddIndex(model_name="job", index=NEW),
            ],
        )
    ]
