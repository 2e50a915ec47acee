"""The API token admin: tokens are shown once, bound to their creator, never escalated.

A token made here acts for the user who makes it (``user``), so approvals with it are that
person's and deactivating them stops it. Admin scope reaches every project, the jobs and
the webhooks: choosing it, on the add form or the change form, needs
``access.grant_admin_token``; the form validates the choice
(``project.access.tokens.may_grant``), it does not merely hide it, and every change is
audited by ``project.access.tokens``.
"""

from django import forms
from django.contrib import admin, messages

from project.access import tokens
from project.access.models import ApiToken, TokenScope
from project.admin_base import ConveyorModelAdmin
from project.admin_permissions import permission_check


class ApiTokenForm(forms.ModelForm):
    """Refuse a scope the user filling the form may not give."""

    class Meta:
        model = ApiToken
        fields = ("name", "scope", "expires_at")

    def clean_scope(self) -> str:
        scope = self.cleaned_data["scope"]
        unchanged = self.instance.pk is not None and self.instance.scope == scope
        if not unchanged and not tokens.may_grant(self.request_user, scope):
            raise forms.ValidationError(
                f"Giving a token {TokenScope.ADMIN} scope needs the "
                f"{tokens.GRANT_ADMIN_PERMISSION} permission."
            )
        return scope


@admin.register(ApiToken)
class ApiTokenAdmin(ConveyorModelAdmin):
    form = ApiTokenForm
    list_display = (
        "name",
        "prefix",
        "scope",
        "user",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("scope",)
    search_fields = ("name", "prefix")
    fields = (
        "name",
        "scope",
        "expires_at",
        "user",
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = ("user", "prefix", "created_by", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    has_revoke_apitoken_permission = permission_check("revoke_apitoken")

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.request_user = request.user
        return form

    def save_model(self, request, obj: ApiToken, form, change) -> None:
        if change:
            updated = tokens.token_update(
                obj,
                changed_by=request.user,
                **{name: form.cleaned_data[name] for name in ApiTokenForm.Meta.fields},
            )
            obj.refresh_from_db()
            return updated
        token, raw = tokens.token_create(
            name=obj.name,
            scope=obj.scope,
            expires_at=obj.expires_at,
            created_by=request.user.get_username(),
            user=request.user,
            granted_by=request.user,
        )
        obj.pk = token.pk
        obj.refresh_from_db()
        self.message_user(
            request, f"Token created. Copy it now, it is not shown again: {raw}", messages.WARNING
        )

    @admin.action(description="Revoke selected tokens", permissions=["revoke_apitoken"])
    def revoke(self, request, queryset):
        for token in queryset.filter(revoked_at__isnull=True):
            tokens.token_revoke(token, actor=request.user.get_username())
        self.message_user(request, "Revoked.", messages.SUCCESS)
