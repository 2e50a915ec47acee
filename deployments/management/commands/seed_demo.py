import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from deployments.demo import DEMO_PROJECTS
from deployments.projects_as_code import apply_document
from project import env


def demo_admin_password() -> tuple[str, str]:
    """Return (password, where it came from): the env var, else one generated and kept in var/."""
    configured = env.string("CONVEYOR_ADMIN_PASSWORD")
    if configured:
        return configured, "CONVEYOR_ADMIN_PASSWORD"
    kept = settings.VAR_DIR / "admin-password"
    if not kept.exists():
        kept.write_text(secrets.token_urlsafe(12))
        kept.chmod(0o600)
    return kept.read_text().strip(), f"generated, kept in {kept}"


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
        self.stdout.write(
            f"Admin:    http://127.0.0.1:{port}/admin/  (user admin, password {password}; {source})"
        )
        self.stdout.write(f"API:      http://127.0.0.1:{port}/api/v1/")
