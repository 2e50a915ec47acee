"""The Jobs list's payload filter: a GIN ``jsonb_path_ops`` index on PostgreSQL only.

``payload @> '{"customer": {"id": 42}}'`` is answered from it (jobs.filters). It is kept out
of the model's state: SQLite has no GIN, and a table rebuilt there must not try to make one.
Built ``CONCURRENTLY``, so enqueue and claim keep running while it builds.
"""

from django.db import migrations

INDEX = "job_payload_path_idx"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} "
            "ON jobs_job USING gin (payload jsonb_path_ops)"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0016_bulk_operations")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
