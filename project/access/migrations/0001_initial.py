"""API tokens and idempotency keys move here from the job engine; no table changes.

The models were ``jobs.ApiToken`` and ``jobs.IdempotencyKey`` (jobs.0002, 0005, 0008). The
move is a change of state only: the tables keep their names (``db_table``), and this app
takes them over as they are; jobs.0018 then drops them from the engine's state, after
deployments.0010 points ``Project.api_tokens`` here. The content types of the two models
are relabelled, so their permissions (``access.add_apitoken``, ``access.grant_admin_token``
...) are the same rows as before and every group or user that held one still does.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MODELS = ("apitoken", "idempotencykey")


def _relabel(apps, schema_editor, source: str, target: str) -> None:
    """Move the two models' content types (and with them their permissions) to ``target``.

    On a fresh database there is nothing to move: post_migrate makes the content types.
    Should ``target`` already have one (a database migrated back and forth), the source's
    permissions join it: a grant of either survives.
    """
    db = schema_editor.connection.alias
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        old = ContentType.objects.using(db).filter(app_label=source, model=model).first()
        if old is None:
            continue
        new = ContentType.objects.using(db).filter(app_label=target, model=model).first()
        if new is None:
            old.app_label = target
            old.save(using=db, update_fields=["app_label"])
        else:
            _merge(apps, db, old, new)


def _merge(apps, db: str, old, new) -> None:
    Permission = apps.get_model("auth", "Permission")
    holders = (
        (apps.get_model("auth", "Group").permissions.through, "group_id"),
        (apps.get_model(settings.AUTH_USER_MODEL).user_permissions.through, "user_id"),
    )
    for permission in Permission.objects.using(db).filter(content_type=old):
        twin = Permission.objects.using(db).filter(
            content_type=new, codename=permission.codename
        ).first()
        if twin is None:
            permission.content_type = new
            permission.save(using=db, update_fields=["content_type"])
            continue
        for through, holder in holders:
            rows = through.objects.using(db)
            held = set(rows.filter(permission_id=twin.pk).values_list(holder, flat=True))
            moving = rows.filter(permission_id=permission.pk).values_list(holder, flat=True)
            rows.bulk_create(
                [through(**{holder: h, "permission_id": twin.pk}) for h in moving if h not in held]
            )
        permission.delete()
    old.delete()


def forward(apps, schema_editor) -> None:
    _relabel(apps, schema_editor, source="jobs", target="access")


def backward(apps, schema_editor) -> None:
    _relabel(apps, schema_editor, source="access", target="jobs")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("jobs", "0017_job_payload_path_index"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        (
                            "prefix",
                            models.CharField(
                                db_index=True, help_text="identifies the token", max_length=16
                            ),
                        ),
                        ("token_hash", models.CharField(editable=False, max_length=64, unique=True)),
                        (
                            "scope",
                            models.CharField(
                                choices=[
                                    ("read", "Read: a project's deployments and logs"),
                                    ("deploy", "Deploy: also trigger, retry and cancel"),
                                    ("admin", "Admin: every project, jobs and webhooks"),
                                ],
                                default="read",
                                max_length=10,
                            ),
                        ),
                        ("created_by", models.CharField(blank=True, default="", max_length=150)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("expires_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                help_text="the person this token acts for (approvals need one); "
                                "deactivating them stops the token",
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_tokens",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "API token",
                        "db_table": "jobs_apitoken",
                        "ordering": ["-created_at"],
                        "permissions": [
                            ("revoke_apitoken", "Can revoke API tokens"),
                            (
                                "grant_admin_token",
                                "Can create admin-scope API tokens or raise a token to admin",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="IdempotencyKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("key", models.CharField(max_length=200)),
                        ("path", models.CharField(max_length=300)),
                        ("fingerprint", models.CharField(max_length=64)),
                        ("status_code", models.PositiveSmallIntegerField(blank=True, null=True)),
                        ("response", models.JSONField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        (
                            "token",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="access.apitoken",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "jobs_idempotencykey",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("token", "path", "key"), name="idempotency_key_unique"
                            )
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(forward, backward),
    ]
