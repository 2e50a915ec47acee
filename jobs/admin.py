"""Operators inspect, retry and cancel jobs here; every action calls the job services."""

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from jobs import attempts, services, tokens
from jobs.errors import IllegalTransition, JobNotFound
from jobs.models import (
    FINISHED,
    ApiToken,
    AuditLog,
    Job,
    JobStatus,
    MaintenanceRun,
    Notification,
)
from jobs.selectors import OVERDUE_INTERVALS, maintenance_status
from project.admin_permissions import permission_check


def _run_for_each(modeladmin, request, queryset: QuerySet, action, verb: str) -> None:
    """Apply ``action`` to each selected job; report how many moved and how many could not."""
    done, refused = 0, []
    for job_id in queryset.values_list("pk", flat=True):
        try:
            action(job_id, actor=request.user.get_username())
            done += 1
        except (IllegalTransition, JobNotFound) as exc:
            refused.append(str(exc))
    if done:
        modeladmin.message_user(request, f"{verb} {done} job(s).", messages.SUCCESS)
    if refused:
        modeladmin.message_user(
            request, f"{len(refused)} refused: " + "; ".join(refused[:5]), messages.WARNING
        )


def _second(when) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S") if when else "—"


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "task",
        "queue",
        "colored_status",
        "attempts_display",
        "reason",
        "run_after",
        "created_at",
        "finished_at",
        "short_error",
    )
    list_filter = ("status", "reason", "queue", "task")
    search_fields = ("=id", "task", "idempotency_key", "last_error")
    date_hierarchy = "created_at"
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False  # counting millions of rows on every page load is slow
    actions = ("retry_jobs", "cancel_jobs")
    exclude = ("attempts_history",)  # shown as a table instead of raw JSON
    readonly_fields = [f.name for f in Job._meta.fields if f.name != "attempts_history"] + [
        "attempt_history"
    ]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    has_retry_job_permission = permission_check("retry_job")
    has_cancel_job_permission = permission_check("cancel_job")

    @admin.display(description="status", ordering="status")
    def colored_status(self, job: Job):
        color = {
            JobStatus.DEAD: "#ba2121",
            JobStatus.SUCCEEDED: "#2e7d32",
            JobStatus.RUNNING: "#1565c0",
            JobStatus.RETRYING: "#ef6c00",
        }.get(job.status, "#555")
        return format_html('<b style="color:{}">{}</b>', color, job.get_status_display())

    @admin.display(description="attempts")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="attempt history")
    def attempt_history(self, job: Job):
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} {}</td><td>{}</td></tr>",
            (
                (
                    entry["attempt"],
                    entry["worker"],
                    _second(entry["started_at"]),
                    _second(entry["finished_at"]),
                    entry["outcome"],
                    f"({entry['reason']})" if entry["reason"] else "",
                    attempts.describe(entry["error"]),
                )
                for entry in reversed(attempts.history(job))
            ),
        )
        if not rows:
            return "no finished attempt yet"
        return format_html(
            "<table><thead><tr><th>#</th><th>worker</th><th>started</th><th>finished</th>"
            "<th>outcome</th><th>error</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="last error")
    def short_error(self, job: Job) -> str:
        return (job.last_error[:80] + "…") if len(job.last_error) > 80 else job.last_error

    @admin.action(description="Retry selected dead/cancelled jobs", permissions=["retry_job"])
    def retry_jobs(self, request, queryset):
        _run_for_each(self, request, queryset, services.job_retry, "Re-queued")

    @admin.action(description="Cancel selected jobs", permissions=["cancel_job"])
    def cancel_jobs(self, request, queryset):
        _run_for_each(
            self, request, queryset.exclude(status__in=FINISHED), services.job_cancel, "Cancelled"
        )


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ("at", "actor", "action", "target_type", "target_id")
    list_filter = ("action", "target_type")
    search_fields = ("actor", "target_id", "action")
    readonly_fields = ("at", "actor", "action", "target_type", "target_id", "details")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("created_at", "recipient", "topic", "title", "read_at")
    list_filter = ("topic", "read_at")
    search_fields = ("title", "body")
    actions = ("mark_read",)

    def get_queryset(self, request):
        queryset = super().get_queryset(request).select_related("recipient")
        return queryset if request.user.is_superuser else queryset.filter(recipient=request.user)

    @admin.action(description="Mark selected as read", permissions=["view"])
    def mark_read(self, request, queryset):
        updated = queryset.filter(read_at__isnull=True).update(read_at=timezone.now())
        self.message_user(request, f"Marked {updated} notification(s) as read.", messages.SUCCESS)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "prefix",
        "scope",
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
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = ("prefix", "created_by", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    has_revoke_apitoken_permission = permission_check("revoke_apitoken")

    def save_model(self, request, obj: ApiToken, form, change) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, raw = tokens.token_create(
            name=obj.name,
            scope=obj.scope,
            expires_at=obj.expires_at,
            created_by=request.user.get_username(),
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


@admin.register(MaintenanceRun)
class MaintenanceRunAdmin(admin.ModelAdmin):
    """Every recorded maintenance run; above the list, each runner's last one."""

    list_display = ("finished_at", "runner", "duration_ms", "counts", "short_error", "host")
    list_filter = ("runner",)
    search_fields = ("runner", "error")
    date_hierarchy = "finished_at"
    list_per_page = 50
    show_full_result_count = False
    readonly_fields = [f.name for f in MaintenanceRun._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="error")
    def short_error(self, run: MaintenanceRun) -> str:
        return (run.error[:80] + "…") if len(run.error) > 80 else run.error

    def changelist_view(self, request, extra_context=None):
        extra_context = {
            **(extra_context or {}),
            "maintenance_runners": maintenance_status(),
            "overdue_intervals": OVERDUE_INTERVALS,
        }
        return super().changelist_view(request, extra_context=extra_context)
