from django.contrib.admin.apps import AdminConfig
from django.core import checks


class ConsoleAdminConfig(AdminConfig):
    """The Django admin, with Conveyor's site (dashboard first, plumbing last) as default."""

    default_site = "project.admin_site.ConsoleAdminSite"

    def ready(self) -> None:
        """Discover every app's admin, then guard the third-party ones (project.admin_plumbing)."""
        super().ready()
        from django.contrib import admin

        from project.admin_checks import check_admins_guard_secrets
        from project.admin_plumbing import register_plumbing_admins

        register_plumbing_admins(admin.site)
        checks.register(check_admins_guard_secrets, checks.Tags.admin)
