"""The payload filter's GIN index leaves out a workflow job's ``members`` (jobs.payload_search).

The index is built ``CONCURRENTLY`` before the old one is dropped, so enqueue and claim keep
running, and a search keeps an index, while it builds. PostgreSQL only, as migration 0017.
"""

from django.db import migrations

OLD = "job_payload_path_idx"
NEW = "job_payload_search_idx"
SEARCHED = "(CASE WHEN workflow_id IS NULL THEN payload ELSE payload - 'members'::text END)"


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {NEW} "
            f"ON jobs_job USING gin ({SEARCHED} jsonb_path_ops)"
        )
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {OLD}")


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {OLD} "
            "ON jobs_job USING gin (payload jsonb_path_ops)"
        )
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NEW}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0027_not_needed_reason_and_edges_kept_with_their_jobs")]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
