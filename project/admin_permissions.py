"""Permission checks for the admin's custom actions and buttons: one rule for all.

Every custom admin action names the permission it needs (``@admin.action(permissions=[...])``);
Django then calls ``has_<name>_permission(request)`` on the ModelAdmin, hides the action from
users who lack it and refuses to run it. A custom permission (``Meta.permissions`` of the
model, e.g. ``("retry_job", "Can retry jobs")``) gets its method from ``permission_check``::

    has_retry_job_permission = permission_check("retry_job")

and a button checks that same method (``self.has_retry_job_permission(request)``), so it is
checked exactly like the action that does the same thing.
"""

from django.contrib.admin import ModelAdmin


def has_permission(modeladmin: ModelAdmin, request, codename: str) -> bool:
    """Return True if the user holds ``<app_label>.<codename>`` of the admin's model."""
    return request.user.has_perm(f"{modeladmin.opts.app_label}.{codename}")


def permission_check(codename: str):
    """Return a ``has_<name>_permission`` method that checks the model permission ``codename``."""

    def check(self: ModelAdmin, request, obj=None) -> bool:
        return has_permission(self, request, codename)

    check.__name__ = f"has_{codename}_permission"
    check.__doc__ = f"Return True if the user may {codename.replace('_', ' ')}."
    return check
