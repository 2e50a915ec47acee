from django.contrib.admin.apps import AdminConfig


class ConsoleAdminConfig(AdminConfig):
    """The Django admin, with Conveyor's site (dashboard first, plumbing last) as default."""

    default_site = "project.admin_site.ConsoleAdminSite"
