import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from deployments.demo import DEMO_PROJECTS
from deployments.models import Project
from deployments.projects_as_code import apply_document
from project import env, secretfiles
from project.access.models import TokenScope
from project.access.tokens import token_authenticate, token_create, token_known


def demo_admin_password() -> tuple[str, str]:
    """Return (password, where it came from): the env var, else one generated and kept in var/."""
    configured = settings.CONVEYOR_ADMIN_PASSWORD
    if configured:
        return configured, "CONVEYOR_ADMIN_PASSWORD"
    kept = settings.VAR_DIR / "admin-password"
    password = secretfiles.kept_secret(kept, lambda: secrets.token_urlsafe(12))
    return password, f"generated, kept in {kept}"


def demo_token() -> tuple[str, str]:
    """Return the demo project's deploy token and a word on where it came from.

    The value is kept in var/demo-token and outlives a change of database (embedded and
    PostgreSQL share var/): a kept value this database has never seen is registered here as
    is, so a token printed earlier keeps working. Only one this database revoked or let expire
    is replaced, and the word says so.
    """
    kept = settings.VAR_DIR / "demo-token"
    found = secretfiles.read_private(kept)
    project = Project.objects.get(slug="demo")
    if found and token_authenticate(found) is not None:
        return found, "kept in var/demo-token"
    if found and not token_known(found):
        try:
            token, raw = token_create(
                name="demo", scope=TokenScope.DEPLOY, created_by="seed_demo", secret=found
            )
        except ValueError:  # not a token: an edited file
            pass
        else:
            project.api_tokens.add(token)
            return raw, "kept in var/demo-token, new to this database"
    token, raw = token_create(name="demo", scope=TokenScope.DEPLOY, created_by="seed_demo")
    project.api_tokens.add(token)
    secretfiles.write_private(kept, raw, replace=True)
    if found:
        return raw, "NEW: the one kept in var/demo-token was revoked, expired or not a token"
    return raw, "kept in var/demo-token"


class Command(BaseCommand):
    help = "Create the demo admin user and demo project (idempotent); print how to log in."

    @transaction.atomic
    def handle(self, *args, **options):
        password, source = demo_admin_password()
        user, created = get_user_model().objects.get_or_create(
            username="admin",
            defaults={"is_staff": True, "is_superuser": True, "email": "admin@example.com"},
        )
        user.is_staff = user.is_superuser = user.is_active = True
        user.set_password(password)
        user.save()
        result = apply_document(DEMO_PROJECTS)
        self.stdout.write(
            "Demo:     project demo, pipelines default, slow, broken "
            f"({result.created} created, {result.updated} updated, {result.unchanged} unchanged)"
        )
        port = env.string("PORT", "8000")
        token, origin = demo_token()
        self.stdout.write(
            f"Admin:    http://127.0.0.1:{port}/admin/  (user admin, password {password}; {source})"
        )
        self.stdout.write(f"API:      http://127.0.0.1:{port}/api/v1/  (docs: /api/v1/docs)")
        self.stdout.write(f"Token:    {token}  (deploy scope, project demo; {origin})")
        self.stdout.write(
            "Try:      curl -s -X POST "
            f"http://127.0.0.1:{port}/api/v1/projects/demo/deployments "
            f"-H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' "
            """-d '{"ref": "main", "pipeline": "default"}'"""
        )
