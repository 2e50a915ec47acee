"""ApiToken and IdempotencyKey leave the job engine's state for the access app's.

State only: their tables (``jobs_apitoken``, ``jobs_idempotencykey``) and rows stay, owned
by access.0001 from now on.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0019_job_tallies"),
        ("access", "0001_initial"),
        ("deployments", "0012_project_api_tokens_in_access"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name="IdempotencyKey"),
                migrations.DeleteModel(name="ApiToken"),
            ],
        ),
    ]
