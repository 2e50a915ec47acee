"""``Project.api_tokens`` follows ApiToken to the access app: state only, no table changes.

The through table (``deployments_project_api_tokens``, column ``apitoken_id``) already points
at ``jobs_apitoken``, the table access.ApiToken keeps.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0001_initial"),
        ("deployments", "0011_health_gate_and_recovery"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name="project",
                    name="api_tokens",
                    field=models.ManyToManyField(
                        blank=True,
                        help_text="read and deploy tokens that may use this project (admin "
                        "tokens see all)",
                        related_name="projects",
                        to="access.apitoken",
                    ),
                ),
            ],
        ),
    ]
