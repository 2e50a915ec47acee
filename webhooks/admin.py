"""Django admin for endpoints, events and deliveries; every action calls a service."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Avg, Count, Max, Q
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from project.access.permissions import allowed
from project.admin_base import ConveyorModelAdmin
from project.admin_permissions import permission_check
from webhooks import services, ssrf
from webhooks.attempt_history import attempt_rows
from webhooks.errors import WebhookError
from webhooks.models import (
    AttemptOutcome,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Endpoint,
    Event,
)
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
        choices=[
            (topic, format_html("<code>{}</code>: {}", topic, text))
            for topic, text in TOPICS.items()
        ],
        # console.css: one topic a line, wrapped between words only
        widget=forms.CheckboxSelectMultiple(attrs={"class": "console-choices"}),
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


# Each button of the endpoint page needs what the admin action doing the same needs.
OPERATIONS = {
    "rotate": "endpoint.rotate",
    "test": "endpoint.test",
    "enable": "endpoint.operate",
    "disable": "endpoint.operate",
    "replay-since": "endpoint.replay",
}


def _operations_allowed(user) -> dict:
    can = {
        "rotate": allowed(user, OPERATIONS["rotate"]),
        "test": allowed(user, OPERATIONS["test"]),
        "enable": allowed(user, OPERATIONS["enable"]),
        "replay": allowed(user, OPERATIONS["replay-since"]),
    }
    return {**can, "any": any(can.values())}


class ReplaySinceForm(forms.Form):
    since = forms.SplitDateTimeField(widget=admin.widgets.AdminSplitDateTime)


STATS_WINDOW = timedelta(hours=24)
LAST_FAILURES = 10


def endpoint_stats(endpoint: Endpoint) -> dict:
    """Success rate and latency of an endpoint's attempts in the last 24 h; last failures."""
    since = timezone.now() - STATS_WINDOW
    tries = DeliveryAttempt.objects.filter(delivery__endpoint=endpoint, started_at__gte=since)
    summary = tries.aggregate(
        total=Count("pk"),
        ok=Count("pk", filter=Q(outcome=AttemptOutcome.DELIVERED)),
        avg=Avg("latency_ms"),
        slowest=Max("latency_ms"),
    )
    # Any 5,000 of the window's attempts, not the first 5,000 by Meta.ordering (id).
    latencies = sorted(
        tries.filter(latency_ms__isnull=False)
        .order_by()
        .values_list("latency_ms", flat=True)[:5000]
    )
    p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))] if latencies else None
    failures = list(
        DeliveryAttempt.objects.filter(delivery__endpoint=endpoint)
        .exclude(outcome=AttemptOutcome.DELIVERED)
        .select_related("delivery__event")
        .order_by("-started_at")[:LAST_FAILURES]
    )
    return {
        **summary,
        "rate": round(100 * summary["ok"] / summary["total"], 1) if summary["total"] else None,
        "p95": p95,
        "failures": _as_rows(failures),
    }


def _as_rows(failures: list[DeliveryAttempt]) -> list:
    """The failures as their deliveries' attempt rows (numbered through replays, labelled)."""
    deliveries = {attempt.delivery_id: attempt.delivery for attempt in failures}
    by_delivery: dict[int, list[DeliveryAttempt]] = {pk: [] for pk in deliveries}
    # A delivery has at most max_attempts per job and one job per replay: a bounded read.
    siblings = DeliveryAttempt.objects.filter(delivery_id__in=deliveries).order_by("id")
    for attempt in siblings.only("id", "delivery_id", "job_id", "number", "outcome"):
        by_delivery[attempt.delivery_id].append(attempt)
    rows = {}
    for pk, attempts in by_delivery.items():
        for row in attempt_rows(attempts, delivery_status=deliveries[pk].status):
            rows[row.attempt.pk] = row
    return [
        {"attempt": attempt, "row": rows[attempt.pk], "delivery": deliveries[attempt.delivery_id]}
        for attempt in failures
    ]


@admin.register(Endpoint)
class EndpointAdmin(ConveyorModelAdmin):
    form = EndpointForm
    list_display = ["id", "url", "enabled", "topic_list", "consecutive_dead", "disabled_by"]
    list_filter = ["enabled", "disabled_by"]
    search_fields = ["description"]  # never the URL: it may be a credential
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
    change_form_template = "admin/webhooks/endpoint/change_form.html"

    def get_readonly_fields(self, request, obj=None):
        # A new endpoint has no state yet: its add form is only what can be set.
        return self.readonly_fields if obj is not None else []

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<int:endpoint_id>/operate/<str:operation>/",
                view(self.operate_view),
                name="webhooks_endpoint_operate",
            ),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        endpoint = self.get_object(request, unquote(object_id))  # None for a malformed id
        extra = dict(extra_context or {})
        if endpoint is not None:
            extra.update(
                stats=endpoint_stats(endpoint),
                can=_operations_allowed(request.user),
                replay_form=ReplaySinceForm(
                    initial={"since": timezone.now() - timedelta(hours=24)}
                ),
            )
        return super().change_view(request, object_id, form_url, extra)

    def operate_view(self, request, endpoint_id: int, operation: str):
        """The endpoint page's buttons: rotate, test, enable, disable, replay-since (POST)."""
        endpoint = get_object_or_404(Endpoint, pk=endpoint_id)
        if request.method != "POST":
            return redirect("admin:webhooks_endpoint_change", endpoint.pk)
        needed = OPERATIONS.get(operation)
        if needed is None or not allowed(request.user, needed):
            raise PermissionDenied
        actor = _actor(request)
        try:
            if operation == "rotate":
                rotated = services.endpoint_rotate_secret(endpoint_id=endpoint.pk, actor=actor)
                self.message_user(
                    request,
                    f"New signing secret (shown only now; the old one works for 24 h): "
                    f"{rotated.secret}",
                    messages.WARNING,
                )
            elif operation == "test":
                delivery = services.endpoint_send_test(endpoint_id=endpoint.pk, actor=actor)
                self.message_user(request, f"Test event sent: delivery {delivery.pk}.")
            elif operation == "enable":
                services.endpoint_enable(endpoint_id=endpoint.pk, actor=actor)
                self.message_user(request, "Enabled.")
            elif operation == "disable":
                services.endpoint_disable(endpoint_id=endpoint.pk, actor=actor)
                self.message_user(request, "Disabled.")
            elif operation == "replay-since":
                form = ReplaySinceForm(request.POST)
                if not form.is_valid():
                    self.message_user(
                        request, "Give a date and time to replay from.", messages.ERROR
                    )
                else:
                    count = services.delivery_replay_since(
                        endpoint_id=endpoint.pk, since=form.cleaned_data["since"], actor=actor
                    )
                    self.message_user(request, f"Replayed {count} delivery(ies).")
            else:
                self.message_user(request, f"Unknown operation {operation!r}.", messages.ERROR)
        except WebhookError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        return redirect("admin:webhooks_endpoint_change", endpoint.pk)

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


@admin.register(Delivery)
class DeliveryAdmin(ConveyorModelAdmin):
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
    # No date_hierarchy: its month list reads every delivery. A date filter is a range.
    list_filter = ["status", "event__type", "endpoint", ("created_at", admin.DateFieldListFilter)]
    list_select_related = ["event", "endpoint"]
    list_per_page = 50
    search_fields = ["event__message_id"]
    actions = ["replay"]

    has_replay_delivery_permission = permission_check("replay_delivery")
    change_form_template = "admin/webhooks/delivery/change_form.html"
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

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a record of what was sent: read-only; replay is a button

    def has_replay_permission(self, request, obj=None) -> bool:
        return allowed(request.user, "delivery.replay")

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<int:delivery_id>/replay/", view(self.replay_view), name="webhooks_delivery_replay"
            ),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        delivery = self.get_object(request, unquote(object_id))  # None for a malformed id
        extra = dict(extra_context or {})
        if delivery is not None:
            extra.update(
                delivery=delivery,
                attempts=attempt_rows(
                    list(delivery.attempts.order_by("id")), delivery_status=delivery.status
                ),
                can_replay=self.has_replay_permission(request)
                and delivery.status != DeliveryStatus.PENDING,
                title=f"Delivery {delivery.pk}: {delivery.event.type} to {delivery.endpoint}",
            )
        return super().change_view(request, object_id, form_url, extra)

    def replay_view(self, request, delivery_id: int):
        if request.method != "POST":
            return redirect("admin:webhooks_delivery_change", delivery_id)
        if not self.has_replay_permission(request):
            raise PermissionDenied
        try:
            delivery = services.delivery_replay(delivery_id=delivery_id, actor=_actor(request))
            self.message_user(request, f"Replaying with job {delivery.job_id}.")
        except WebhookError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        return redirect("admin:webhooks_delivery_change", delivery_id)

    @admin.display(description="type", ordering="event__type")
    def event_type(self, obj: Delivery) -> str:
        return obj.event.type

    @admin.display(description="event")
    def event_link(self, obj: Delivery) -> str:
        return format_html(
            '<a href="{}">{} ({})</a>',
            reverse("admin:webhooks_event_change", args=[obj.event_id]),
            obj.event.message_id,
            obj.event.type,
        )

    @admin.display(description="job")
    def job_link(self, obj: Delivery) -> str:
        if obj.job is None:
            return "-"
        return format_html(
            '<a href="{}">{}</a> [{}, attempt {}/{}]',
            reverse("admin:jobs_job_change", args=[obj.job.pk]),
            obj.job.pk,
            obj.job.status,
            obj.job.attempts,
            obj.job.max_attempts,
        )

    @admin.display(description="body")
    def body(self, obj: Delivery) -> str:
        return format_html('<pre class="console-pre">{}</pre>', obj.event.body)

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
class EventAdmin(ConveyorModelAdmin):
    list_display = ["id", "message_id", "type", "created_at"]
    list_filter = ["type"]
    search_fields = ["message_id"]
    readonly_fields = ["message_id", "type", "created_at", "body"]
    fields = readonly_fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
