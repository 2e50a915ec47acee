"""A system check: every registered admin uses ConveyorAdminMixin and exposes no secret field."""

from django.contrib import admin
from django.core import checks

from project.admin_base import ConveyorAdminMixin
from project.secret_fields import lookup_reaches_secret


def check_admins_guard_secrets(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Report admins without the mixin, and secret fields in search_fields or list_filter."""
    errors = []
    for model, model_admin in admin.site._registry.items():
        name = f"{type(model_admin).__module__}.{type(model_admin).__qualname__}"
        if not isinstance(model_admin, ConveyorAdminMixin):
            errors.append(
                checks.Error(
                    f"{name} ({model._meta.label}) does not use ConveyorAdminMixin",
                    hint="subclass project.admin_base.ConveyorModelAdmin",
                    obj=model_admin,
                    id="conveyor.E001",
                )
            )
        declared = [str(f) for f in model_admin.search_fields or ()] + [
            f if isinstance(f, str) else f[0]
            for f in model_admin.list_filter or ()
            if isinstance(f, (str, list, tuple))
        ]
        for field in declared:
            if lookup_reaches_secret(model, field):
                errors.append(
                    checks.Error(
                        f"{name} searches or filters on the secret field {field!r}",
                        hint="secret fields (project.secret_fields) are never searchable",
                        obj=model_admin,
                        id="conveyor.E002",
                    )
                )
    return errors
