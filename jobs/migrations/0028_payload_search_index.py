"""The payload filter's GIN index leaves out a workflow job's ``members`` (jobs.payload_search).

The index is built ``CONCURRENTLY`` before the old one is dropped, so enqueue and claim keep
running, and a search keeps an index, while it builds. A build that failed (a timeout, a
cancel) leaves an invalid index of that name, which ``IF NOT EXISTS`` would take for built:
it is dropped and built again, and the old index goes only once the new one is valid.
PostgreSQL only, as migration 0017.
"""

from django.db import migrations

OLD = "job_payload_path_idx"
NEW = "job_payload_search_idx"
SEARCHED = "(CASE WHEN workflow_id IS NULL THEN payload ELSE payload - 'members'::text END)"


def _valid(schema_editor, name: str) -> bool | None:
    """Whether index ``name`` is built and usable (None: there is none)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s",
            [name],
        )
        row = cursor.fetchone()
    return None if row is None else row[0]


def _replace(schema_editor, old: str, new: str, expression: str) -> None:
    if _valid(schema_editor, new) is False:  # a build that failed half-way
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {new}")
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {new} "
        f"ON jobs_job USING gin ({expression} jsonb_path_ops)"
    )
    if not _valid(schema_editor, new):
        raise RuntimeError(f"index {new} was not built: {old} is kept; run the migration again")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {old}")


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _replace(schema_editor, OLD, NEW, SEARCHED)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _replace(schema_editor, NEW, OLD, "payload")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0027_not_needed_reason_and_edges_kept_with_their_jobs")]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
