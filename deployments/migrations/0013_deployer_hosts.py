"""Workspaces per (project, host), Deployer rows, and a project's runs_on.

Existing workspace rows are kept and given the host of the process that migrates
(``CONVEYOR_DEPLOYER_HOST``): before this, each project had one row, for whichever host
cloned first. Run the migration where that host's settings apply, or re-point the rows in
the admin afterwards.
"""

from django.conf import settings
from django.db import migrations, models

import deployments.models.projects


def assign_host(apps, schema_editor):
    Workspace = apps.get_model("deployments", "Workspace")
    Workspace.objects.filter(host="").update(host=settings.CONVEYOR_DEPLOYER_HOST)


class Migration(migrations.Migration):
    dependencies = [("deployments", "0012_project_api_tokens_in_access")]

    operations = [
        migrations.AddField(
            model_name="workspace",
            name="host",
            field=models.CharField(
                default="", help_text="the deployer host holding this clone", max_length=100
            ),
            preserve_default=False,
        ),
        migrations.RunPython(assign_host, migrations.RunPython.noop),
        migrations.AddField(
            model_name="workspace",
            name="gone_at",
            field=models.DateTimeField(
                blank=True, help_text="when its host was marked gone", null=True
            ),
        ),
        migrations.AlterField(
            model_name="workspace",
            name="project",
            field=models.ForeignKey(
                on_delete=models.deletion.CASCADE,
                related_name="workspaces",
                to="deployments.project",
            ),
        ),
        migrations.AddConstraint(
            model_name="workspace",
            constraint=models.UniqueConstraint(
                fields=("project", "host"), name="workspace_project_host_unique"
            ),
        ),
        migrations.AddIndex(
            model_name="workspace",
            index=models.Index(fields=["host"], name="workspace_host_idx"),
        ),
        migrations.CreateModel(
            name="Deployer",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("host", models.CharField(max_length=100, unique=True)),
                ("tags", models.JSONField(blank=True, default=list)),
                ("workspaces_dir", models.CharField(blank=True, default="", max_length=500)),
                ("free_disk_bytes", models.BigIntegerField(blank=True, null=True)),
                ("started_at", models.DateTimeField()),
                ("last_seen_at", models.DateTimeField()),
                ("gone_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "indexes": [models.Index(fields=["last_seen_at"], name="deployer_seen_idx")],
            },
        ),
        migrations.AddField(
            model_name="deployment",
            name="waiting_for",
            field=models.CharField(
                blank=True,
                default="",
                help_text="what it waits for before it can run",
                max_length=300,
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="waiting_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="project",
            name="runs_on",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="tags a deployer host must all have to run this project's "
                'deployments, e.g. ["linux", "gpu"]',
                validators=[deployments.models.projects.validate_tags],
            ),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="failure_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("step_failed", "A step failed"),
                    ("timed_out", "Timed out"),
                    ("worker_lost", "Worker lost"),
                    ("worker_shutdown", "Its worker shut down"),
                    ("git_error", "Git checkout failed"),
                    ("workdir_error", "The working directory is not usable"),
                    ("internal_error", "Internal error"),
                    ("job_lost", "Its job was cancelled or lost before it ran"),
                    ("cancelled", "Cancelled"),
                    ("superseded", "Superseded by a newer deployment"),
                    ("rejected", "An approver rejected it"),
                    ("approval_expired", "Not approved in time"),
                    ("no_deployer", "No live deployer host has its project's runs_on tags"),
                ],
                default="",
                max_length=32,
            ),
        ),
    ]
