"""Count django.tasks jobs under their function path: the accounting triggers, replaced.

``jobs.accounting.triggers.install`` now counts a ``jobs.django_task`` job under its payload's
``path``; this puts the new triggers in place (SQLite keeps a trigger of the same name, so
the old ones are dropped first) and rebuilds the counts from the table in the same
transaction.
"""

from django.db import migrations


def reinstall(apps, schema_editor):
    from jobs.accounting import triggers

    triggers.uninstall(schema_editor.connection)
    triggers.install(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0020_api_tokens_move_to_access")]

    operations = [migrations.RunPython(reinstall, reinstall, elidable=False)]
