"""Django admin for endpoints, events and deliveries; every action calls a service."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils import timezone

from project.admin_permissions import permission_check
from webhooks import services, ssrf
from webhooks.errors import WebhookError
from webhooks.models import Delivery, DeliveryAttempt, Endpoint, Event
from webhooks.topics import TOPICS


def _actor(request) -> str:
    return request.user.get_username() or "admin"


def _run(modeladmin, request, queryset, verb: str, call) -> None:
    """Call ``call(obj)`` for each selected object; report one counted message and errors."""
    done = 0
    for obj in queryset:
        try:
            call(obj)
            done += 1
        except WebhookError as exc:
            modeladmin.message_user(request, f"{obj}: {exc}", messages.ERROR)
    if done:
        modeladmin.message_user(request, f"{verb} {done} item(s).", messages.SUCCESS)


class EndpointForm(forms.ModelForm):
    topics = forms.MultipleChoiceField(
        choices=[(topic, f"{topic}: {text}") for topic, text in TOPICS.items()],
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = Endpoint
        fields = ["url", "description", "topics"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            ssrf.check_for_save(url)
        except WebhookError as exc:
            raise forms.ValidationError(str(exc)) from None
        return url


class ReplaySinceForm(forms.Form):
    since = forms.SplitDateTimeField(widget=admin.widgets.AdminSplitDateTime)


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    form = EndpointForm
    list_display = ["id", "url", "enabled", "topic_list", "consecutive_dead", "disabled_by"]
    list_filter = ["enabled", "disabled_by"]
    search_fields = ["url", "description"]
    readonly_fields = [
        "enabled",
        "disabled_by",
        "disabled_reason",
        "disabled_at",
        "consecutive_dead",
        "previous_secret_expires_at",
        "created_at",
        "updated_at",
    ]
    actions = ["enable", "disable", "rotate_secret", "send_test", "replay_since"]

    has_rotate_secret_permission = permission_check("rotate_secret")
    has_send_test_permission = permission_check("send_test")
    # Replaying acts on deliveries: the permission is the Delivery model's.
    has_replay_delivery_permission = permission_check("replay_delivery")

    @admin.display(description="topics")
    def topic_list(self, obj: Endpoint) -> str:
        return ", ".join(obj.topics)

    def save_model(self, request, obj, form, change) -> None:
        fields = {key: form.cleaned_data[key] for key in ("url", "description", "topics")}
        try:
            if change:
                services.endpoint_update(endpoint_id=obj.pk, actor=_actor(request), **fields)
            else:
                created = services.endpoint_create(actor=_actor(request), **fields)
                obj.pk = created.pk
                self.message_user(
                    request,
                    f"Signing secret (shown only now, keep it): {created.secret}",
                    messages.WARNING,
                )
        except WebhookError as exc:  # a race with a DNS change since the form was checked
            self.message_user(request, str(exc), messages.ERROR)
            return
        obj.refresh_from_db()

    def delete_model(self, request, obj) -> None:
        services.endpoint_delete(endpoint_id=obj.pk, actor=_actor(request))

    def delete_queryset(self, request, queryset) -> None:
        for endpoint in queryset:
            services.endpoint_delete(endpoint_id=endpoint.pk, actor=_actor(request))

    @admin.action(description="Enable selected endpoints", permissions=["change"])
    def enable(self, request, queryset):
        _run(
            self,
            request,
            queryset,
            "Enabled",
            lambda e: services.endpoint_enable(endpoint_id=e.pk, actor=_actor(request)),
        )

    @admin.action(description="Disable selected endpoints", permissions=["change"])
    def disable(self, request, queryset):
        _run(
            self,
            request,
            queryset,
            "Disabled",
            lambda e: services.endpoint_disable(endpoint_id=e.pk, actor=_actor(request)),
        )

    @admin.action(
        description="Rotate the signing secret (old one valid 24 h)", permissions=["rotate_secret"]
    )
    def rotate_secret(self, request, queryset):
        def rotate(endpoint):
            rotated = services.endpoint_rotate_secret(
                endpoint_id=endpoint.pk, actor=_actor(request)
            )
            self.message_user(
                request, f"{rotated}: new secret (shown only now): {rotated.secret}", messages.INFO
            )

        _run(self, request, queryset, "Rotated", rotate)

    @admin.action(description="Send a test event", permissions=["send_test"])
    def send_test(self, request, queryset):
        _run(
            self,
            request,
            queryset,
            "Sent a test event to",
            lambda e: services.endpoint_send_test(endpoint_id=e.pk, actor=_actor(request)),
        )

    @admin.action(
        description="Replay dead and skipped deliveries since…", permissions=["replay_delivery"]
    )
    def replay_since(self, request, queryset):
        if "apply" in request.POST:
            form = ReplaySinceForm(request.POST)
            if form.is_valid():
                since = form.cleaned_data["since"]
                total = 0
                for endpoint in queryset:
                    try:
                        total += services.delivery_replay_since(
                            endpoint_id=endpoint.pk, since=since, actor=_actor(request)
                        )
                    except WebhookError as exc:
                        self.message_user(request, f"{endpoint}: {exc}", messages.ERROR)
                self.message_user(request, f"Replayed {total} delivery(ies).", messages.SUCCESS)
                return None
        else:
            form = ReplaySinceForm(initial={"since": timezone.now() - timedelta(hours=24)})
        return TemplateResponse(
            request,
            "admin/webhooks/replay_since.html",
            {
                **self.admin_site.each_context(request),
                "title": "Replay dead and skipped deliveries",
                "form": form,
                "endpoints": queryset,
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                "media": self.media + form.media,
            },
        )


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    fields = [
        "number",
        "started_at",
        "outcome",
        "status_code",
        "latency_ms",
        "address",
        "error",
        "response_body",
    ]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "event_type",
        "endpoint",
        "status",
        "last_status_code",
        "replays",
        "created_at",
        "delivered_at",
    ]
    list_filter = ["status", "event__type", "endpoint"]
    list_select_related = ["event", "endpoint"]
    list_per_page = 50
    search_fields = ["event__message_id"]
    date_hierarchy = "created_at"
    inlines = [DeliveryAttemptInline]
    actions = ["replay"]

    has_replay_delivery_permission = permission_check("replay_delivery")
    readonly_fields = [
        "event_link",
        "endpoint",
        "status",
        "job_link",
        "replays",
        "last_status_code",
        "last_error",
        "last_attempt_at",
        "delivered_at",
        "created_at",
        "updated_at",
        "body",
    ]
    fields = readonly_fields

    @admin.display(description="type", ordering="event__type")
    def event_type(self, obj: Delivery) -> str:
        return obj.event.type

    @admin.display(description="event")
    def event_link(self, obj: Delivery) -> str:
        return f"{obj.event.message_id} ({obj.event.type})"

    @admin.display(description="job")
    def job_link(self, obj: Delivery) -> str:
        if obj.job is None:
            return "-"
        return f"{obj.job.pk} [{obj.job.status}, attempt {obj.job.attempts}/{obj.job.max_attempts}]"

    @admin.display(description="body")
    def body(self, obj: Delivery) -> str:
        return obj.event.body

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Replay selected deliveries", permissions=["replay_delivery"])
    def replay(self, request, queryset):
        _run(
            self,
            request,
            queryset,
            "Replayed",
            lambda d: services.delivery_replay(delivery_id=d.pk, actor=_actor(request)),
        )


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["id", "message_id", "type", "created_at"]
    list_filter = ["type"]
    search_fields = ["message_id"]
    readonly_fields = ["message_id", "type", "created_at", "body"]
    fields = readonly_fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
