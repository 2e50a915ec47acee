"""Admin for deploy locks: take one with a reason, see who holds what, release.

Taking and releasing go through deployments.deploy_locks, as the API's do, so both are
audited and a lock held by someone else is refused. A lock is never edited in place: its
holder takes it again (new reason or expiry) or releases it. Whoever took a lock may
release it; anyone else needs ``deployments.delete_deploylock`` (the admin's delete).
"""

from datetime import timedelta

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from deployments import deploy_locks
from deployments.errors import DeploymentError, NotLocked
from deployments.models import DeployLock, Project
from project.access.permissions import allowed
from project.admin_base import ConveyorModelAdmin
from project.env import parse_duration


def holder_of(request: HttpRequest) -> deploy_locks.Holder:
    user = request.user
    return deploy_locks.Holder(
        label=user.get_username(), user=user, admin=allowed(user, "environment.unlock_any")
    )


class DeployLockForm(forms.ModelForm):
    expires_in = forms.CharField(
        required=False,
        max_length=20,
        help_text="seconds, or 30m, 2h, 1d (at most 90 days); empty: until released",
    )

    class Meta:
        model = DeployLock
        fields = ("project", "environment", "reason")

    def __init__(self, *args, request: HttpRequest, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.request = request
        self.fields["project"].queryset = Project.objects.order_by("slug")

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            self.instance = deploy_locks.lock_acquire(
                cleaned["project"],
                cleaned["environment"],
                reason=cleaned["reason"],
                holder=holder_of(self.request),
                expires_in=_expiry(cleaned.get("expires_in")),
            )
        except DeploymentError as exc:
            field = getattr(exc, "field", "") or None
            raise forms.ValidationError({field: str(exc)} if field else str(exc)) from None
        return cleaned

    def validate_unique(self) -> None:
        """The service replaces an expired lock; the unique check would refuse it first."""

    def _post_clean(self) -> None:
        """The lock was taken by the service in ``clean``; nothing is copied onto it."""


def _expiry(raw: str | None) -> timedelta | None:
    if not raw:
        return None
    try:
        return parse_duration(raw.strip())
    except ValueError as exc:
        raise forms.ValidationError({"expires_in": str(exc)}) from None


@admin.register(DeployLock)
class DeployLockAdmin(ConveyorModelAdmin):
    list_display = ("project", "environment", "reason", "locked_by", "locked_at", "expires_at")
    list_filter = ("project", "environment")
    list_select_related = ("project",)
    actions = None  # a release goes one by one, through the service (holder or admin)
    fields = ("project", "environment", "reason", "expires_in")

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is not None:  # a read-only page: nothing is edited
            return super().get_form(request, obj, change, **kwargs)

        class BoundForm(DeployLockForm):
            def __init__(self, *args, **kw):
                super().__init__(*args, request=request, **kw)

        return BoundForm

    def get_fields(self, request, obj=None):
        if obj is None:
            return self.fields
        return ("project", "environment", "reason", "locked_by", "locked_at", "expires_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("project", "environment", "reason", "locked_by", "locked_at", "expires_at")

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # taken again or released, never edited

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and holder_of(request).took(obj):
            return True
        return super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change) -> None:
        """Saved already: the form's clean took the lock through the service."""

    def delete_model(self, request, obj) -> None:
        try:
            deploy_locks.lock_release(obj.project, obj.environment, holder=holder_of(request))
        except NotLocked:
            obj.delete()  # it had expired: nothing held, the row is only tidied away
        except DeploymentError as exc:
            raise PermissionDenied(str(exc)) from None

    def delete_queryset(self, request, queryset) -> None:
        for lock in queryset:
            self.delete_model(request, lock)
