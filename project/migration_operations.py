"""Index operations that do not block writes on PostgreSQL (``CONCURRENTLY``), plain elsewhere.

Adding an index to a table of millions of jobs takes minutes; a plain ``CREATE INDEX`` holds
off every enqueue and claim for that long. A migration using these sets ``atomic = False``.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db.migrations import AddIndex, RemoveIndex


class AddIndexOnline(AddIndexConcurrently):
    """Create an index ``CONCURRENTLY`` on PostgreSQL, as a plain ``AddIndex`` elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class RemoveIndexOnline(RemoveIndexConcurrently):
    """Drop an index ``CONCURRENTLY`` on PostgreSQL, as a plain ``RemoveIndex`` elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return RemoveIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return RemoveIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
