"""Operators inspect, retry and cancel jobs here; every action calls the job services.

Retry and cancel go through ``jobs.owners``: a job that belongs to a deployment or a webhook
delivery is retried or cancelled by its owner's rules, and the list shows the owner's status.
"""

import json

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.shortcuts import redirect
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from jobs import attempts, limiter, owners, task_names
from jobs.admin_bulk import BulkAdminMixin
from jobs.changelist import JobPaginator, QueueFilter, TaskFilter, to_the_second
from jobs.errors import IllegalTransition, JobNotFound
from jobs.filters import ErrorClassFilter, OwnedByFilter, PayloadFilter, WorkflowFilter
from jobs.models import (
    DEAD_LETTER,
    FINISHED,
    AuditLog,
    Job,
    JobReason,
    JobStatus,
    MaintenanceRun,
    Notification,
)
from jobs.selectors import OVERDUE_INTERVALS, maintenance_status
from jobs.workflows.state import running_among
from project.access.permissions import allowed
from project.admin_base import ConveyorChangeList, ConveyorModelAdmin
from project.admin_permissions import permission_check
from project.redaction import redact_text
from project.timing import seconds_between


def _run_for_each(modeladmin, request, queryset: QuerySet, action, verb: str) -> None:
    """Apply ``action`` to each selected job; report how many moved and how many could not."""
    done, refused = 0, []
    for job_id in queryset.values_list("pk", flat=True):
        try:
            _act(action, job_id, request)
            done += 1
        except (IllegalTransition, JobNotFound) as exc:
            refused.append(str(exc))
    if done:
        modeladmin.message_user(request, f"{verb} {done} job(s).", messages.SUCCESS)
    if refused:
        modeladmin.message_user(
            request, f"{len(refused)} refused: " + "; ".join(refused[:5]), messages.WARNING
        )


def _act(action, job_id: int, request):
    """Call a retry or cancel as the console user (retries also record the person)."""
    if action is owners.job_retry:
        return action(job_id, actor=request.user.get_username(), user=request.user)
    return action(job_id, actor=request.user.get_username())


def _traceback(error: dict | None):
    """An attempt's stored traceback (its last 8 KB, jobs.attempts), collapsed; or nothing."""
    text = (error or {}).get("traceback") or ""
    if not text:
        return ""
    return format_html(
        '<details class="attempt-traceback"><summary>traceback</summary>'
        '<pre class="console-pre">{}</pre></details>',
        redact_text(text),
    )


# A list cell shows at most this much text (the rest is cut by CSS with an ellipsis), and
# its title, shown on hover, at most TITLE_CHARS: an error can be kilobytes long.
CELL_CHARS = 200
TITLE_CHARS = 2000


def clipped(text: str, title: str):
    """One line of list text, cut with an ellipsis (console.css ``.clip``), whole on hover."""
    return format_html(
        '<span class="clip" title="{}">{}</span>', title[:TITLE_CHARS], text[:CELL_CHARS]
    )


# Looked up once, not through get_FOO_display (which rebuilds the choices on every call).
STATUS_LABELS = dict(JobStatus.choices)
REASON_LABELS = dict(JobReason.choices)


def pretty_json(value):
    """Render JSON for a read-only page: indented, wrapped, escaped."""
    if value is None:
        return "—"
    return format_html(
        '<pre class="console-pre">{}</pre>',
        json.dumps(value, indent=2, sort_keys=True, default=str),
    )


def _to_the_second(field: str):
    """A read-only display of a datetime field to the second (the admin shows minutes)."""

    @admin.display(description=field.replace("_", " "), ordering=field)
    def show(self, job: Job) -> str:
        return to_the_second(getattr(job, field))

    return show


class OwnerFilter(admin.SimpleListFilter):
    title = "owner"
    parameter_name = "owner"

    def lookups(self, request, model_admin):
        return [("failed", "Owner failed (deployment failed, delivery dead)")]

    def queryset(self, request, queryset):
        if self.value() == "failed":
            return queryset.filter(owners.failed_owner_filter())
        return queryset


class DeadLetterFilter(admin.SimpleListFilter):
    """Dead jobs still waiting for an operator, or those a later job took over."""

    title = "dead letter"
    parameter_name = "dead_letter"

    def lookups(self, request, model_admin):
        return [
            ("yes", "Dead letters (dead, not superseded)"),
            ("superseded", "Dead, superseded by a replay or retry"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(DEAD_LETTER)
        if self.value() == "superseded":
            return queryset.filter(status=JobStatus.DEAD, superseded_at__isnull=False)
        return queryset


class JobChangeList(ConveyorChangeList):
    """Looks up the owners of a page of jobs in one query per owning app."""

    def get_queryset(self, request, exclude_parameters=None):
        # A page shows neither the attempt history nor the result: a dead job's history is
        # kilobytes of tracebacks, which would be read and decoded for every row.
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.defer("attempts_history", "result")

    def get_results(self, request):
        super().get_results(request)
        found = owners.describe(self.result_list)
        for job in self.result_list:
            job.owner_info = found.get(job.pk)


@admin.register(Job)
class JobAdmin(BulkAdminMixin, ConveyorModelAdmin):
    # Fields and display methods that read only the row (owners come in one query per owning
    # app, in JobChangeList): jobs.changelist.page_rows renders them in one pass.
    list_display = (
        "id",
        "task_name",
        "queue",
        "colored_status",
        "attempts_display",
        "created_at",
        "finished_at",
        "run_time",
        "owner_link",
        "short_error",
    )
    # Queue and task choices come from declared names and the accounting, never DISTINCT over
    # the table; no date_hierarchy (its month list sorts the whole table).
    # Payload, error class and owner are typed (jobs.filters); times are ranges (__gte, __lt).
    list_filter = (
        "status",
        DeadLetterFilter,
        OwnerFilter,
        "reason",
        QueueFilter,
        TaskFilter,
        PayloadFilter,
        ErrorClassFilter,
        OwnedByFilter,
        WorkflowFilter,
        ("created_at", admin.DateFieldListFilter),
        ("finished_at", admin.DateFieldListFilter),
    )
    search_fields = ("=id", "task", "idempotency_key", "last_error")
    # The dashboard's links: dead since a time, running on one worker (project.dashboard).
    extra_lookups = ("finished_at__gte", "locked_by__startswith")
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False  # counting millions of rows on every page load is slow
    actions = ("retry_jobs", "cancel_jobs")
    moment_columns = False  # page_rows shows times through project.times itself

    class Media:
        css = {"all": ("console/console.css",)}  # the status colours (job-status)

    change_form_template = "admin/jobs/job/change_form.html"
    change_list_template = "admin/jobs/job/change_list.html"  # rows from page_rows
    TIMES = (
        "run_after",
        "created_at",
        "started_at",
        "finished_at",
        "updated_at",
        "lease_expires_at",
        "cancel_requested_at",
        "published_at",
        "superseded_at",
    )
    fields = readonly_fields = (
        "owner_link",
        "task_runs",
        "queue",
        "status",
        "waiting",
        "reason",
        "priority",
        "attempts",
        "max_attempts",
        "last_error",
        "locked_by",
        "idempotency_key",
        "unique_key",
        "unique_states",
        "unique_period",
        "publish_count",
        *(f"{name}_second" for name in TIMES),
        "payload_pretty",
        "result_pretty",
        "attempt_history",
    )
    run_after_second = _to_the_second("run_after")
    created_at_second = _to_the_second("created_at")
    started_at_second = _to_the_second("started_at")
    finished_at_second = _to_the_second("finished_at")
    updated_at_second = _to_the_second("updated_at")
    lease_expires_at_second = _to_the_second("lease_expires_at")
    cancel_requested_at_second = _to_the_second("cancel_requested_at")
    published_at_second = _to_the_second("published_at")
    superseded_at_second = _to_the_second("superseded_at")

    def get_deleted_objects(self, objs, request):
        """Django's answer, with each job of a workflow that has not ended as protected (the
        delete page and "Delete selected" then delete nothing): its dependants would wait for
        good, or run without its outcome. Cancel the workflow first."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        jobs = list(objs)
        running = running_among({job.workflow_id for job in jobs if job.workflow_id})
        protected = [
            *protected,
            *(
                f"{job}: its workflow {job.workflow_id} has not ended (cancel it first)"
                for job in jobs
                if job.workflow_id in running
            ),
        ]
        return deleted, counts, perms_needed, protected

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # read-only: retry and cancel are buttons and actions

    def has_retry_permission(self, request, obj=None) -> bool:
        return allowed(request.user, "job.retry")

    def has_cancel_permission(self, request, obj=None) -> bool:
        return allowed(request.user, "job.cancel")

    def get_changelist(self, request, **kwargs):
        return JobChangeList

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        """Count from the accounting, a capped count or an estimate (see jobs.changelist)."""
        return JobPaginator(
            queryset,
            per_page,
            request=request,
            orphans=orphans,
            allow_empty_first_page=allow_empty_first_page,
        )

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:job_id>/retry/", view(self.retry_view), name="jobs_job_retry"),
            path("<int:job_id>/cancel/", view(self.cancel_view), name="jobs_job_cancel"),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        job = self.get_object(request, unquote(object_id))
        if job is None:  # no such job, or not an id at all: Django's "does not exist" redirect
            return super().change_view(request, object_id, form_url, extra_context)
        owner = owners.owner_of(job.task)
        extra = {
            "can_retry": job.status in (JobStatus.DEAD, JobStatus.CANCELLED)
            and self.has_retry_permission(request),
            "can_cancel": job.status not in FINISHED and self.has_cancel_permission(request),
            "owner_notes": owner.notes if owner else {},
            "title": f"Job {job.pk}: {task_names.display_name(job.task, job.payload)} "
            f"[{job.get_status_display()}]",
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, extra)

    def _button(self, request, job_id: int, permission: str, action, verb: str):
        if request.method != "POST":
            return redirect("admin:jobs_job_change", job_id)
        if not allowed(request.user, permission):
            raise PermissionDenied
        try:
            job = _act(action, job_id, request)
        except (IllegalTransition, JobNotFound) as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return redirect("admin:jobs_job_change", job_id)
        if isinstance(job, owners.OwnerInfo):  # created, but it has no job yet
            self.message_user(
                request,
                f"{verb} job {job_id} through its owner: {job.label} is {job.status}.",
                messages.SUCCESS,
            )
            return redirect(job.url) if job.url else redirect("admin:jobs_job_change", job_id)
        if job.pk != job_id:
            self.message_user(
                request,
                f"{verb} job {job_id} through its owner: job {job.pk} does the work now.",
                messages.SUCCESS,
            )
        else:
            self.message_user(request, f"{verb} job {job_id}: now {job.status}.", messages.SUCCESS)
        return redirect("admin:jobs_job_change", job.pk)

    def retry_view(self, request, job_id: int):
        return self._button(request, job_id, "job.retry", owners.job_retry, "Retried")

    def cancel_view(self, request, job_id: int):
        return self._button(request, job_id, "job.cancel", owners.job_cancel, "Cancelled")

    @admin.display(description="task", ordering="task")
    def task_name(self, job: Job):
        """The task, or a django.tasks job's function path (``jobs.task_names``)."""
        name = task_names.display_name(job.task, job.payload)
        return clipped(name, name)

    @admin.display(description="run time", empty_value="")
    def run_time(self, job: Job) -> str | None:
        """The last attempt's run time (finished - started); blank while it has not ended."""
        seconds = seconds_between(job.started_at, job.finished_at, digits=1)
        return None if seconds is None or seconds < 0 else f"{seconds:.1f}s"

    @admin.display(description="owner")
    def owner_link(self, job: Job):
        info = getattr(job, "owner_info", None)
        if info is None and not hasattr(job, "owner_info"):
            info = owners.describe([job]).get(job.pk)
        if info is None:
            return "—"
        return format_html(
            '<span class="clip" title="{} ({})"><a href="{}">{}</a> <span class="pill {}">{}</span>'
            "</span>",
            info.label,
            info.status,
            info.url,
            info.label,
            info.status,
            info.status,
        )

    @admin.display(description="payload")
    def payload_pretty(self, job: Job):
        return pretty_json(job.payload)

    @admin.display(description="result")
    def result_pretty(self, job: Job):
        return pretty_json(job.result)

    has_retry_job_permission = permission_check("retry_job")
    has_cancel_job_permission = permission_check("cancel_job")

    @admin.display(description="status", ordering="status")
    def colored_status(self, job: Job):
        """The status as a coloured label; its reason, if any, on hover (the row stays short)."""
        # A class, not a style attribute: the console's CSP allows no inline style.
        label = STATUS_LABELS.get(job.status, job.status)
        if not job.reason:
            return format_html('<b class="job-status {}">{}</b>', job.status, label)
        return format_html(
            '<b class="job-status {} has-reason" title="{}">{}</b>',
            job.status,
            REASON_LABELS.get(job.reason, job.reason),
            label,
        )

    @admin.display(description="waiting because")
    def waiting(self, job: Job) -> str:
        return limiter.why_waiting(job) or "—"  # empty: it is not waiting

    @admin.display(description="task")
    def task_runs(self, job: Job) -> str:
        name = task_names.display_name(job.task, job.payload)
        if name == job.task:
            return name
        return f"{name} (a django.tasks function, run by {job.task})"

    @admin.display(description="tries")
    def attempts_display(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="attempt history")
    def attempt_history(self, job: Job):
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} {}</td><td>{}{}</td></tr>",
            (
                (
                    entry["attempt"],
                    entry["worker"],
                    to_the_second(entry["started_at"]),
                    to_the_second(entry["finished_at"]),
                    entry["outcome"],
                    f"({entry['reason']})" if entry["reason"] else "",
                    attempts.describe(entry["error"]),
                    _traceback(entry["error"]),
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
    def short_error(self, job: Job):
        return clipped(job.last_error, job.last_error) if job.last_error else ""

    @admin.action(description="Retry selected dead/cancelled jobs", permissions=["retry_job"])
    def retry_jobs(self, request, queryset):
        _run_for_each(self, request, queryset, owners.job_retry, "Re-queued")

    @admin.action(description="Cancel selected jobs", permissions=["cancel_job"])
    def cancel_jobs(self, request, queryset):
        _run_for_each(
            self, request, queryset.exclude(status__in=FINISHED), owners.job_cancel, "Cancelled"
        )


@admin.register(AuditLog)
class AuditLogAdmin(ConveyorModelAdmin):
    list_display = ("at", "actor", "action", "target_type", "target_id")
    list_filter = ("action", "target_type")
    search_fields = ("actor", "target_id", "action")
    readonly_fields = ("at", "actor", "action", "target_type", "target_id", "details")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(ConveyorModelAdmin):
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


@admin.register(MaintenanceRun)
class MaintenanceRunAdmin(ConveyorModelAdmin):
    """Every recorded maintenance run; above the list, each runner's last one."""

    list_display = ("finished_at", "runner", "duration_ms", "counts", "short_error", "host")
    # No date_hierarchy: its month list sorts every run. A date filter is a range.
    list_filter = ("runner", ("finished_at", admin.DateFieldListFilter))
    search_fields = ("runner", "error")
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


from jobs import admin_queues, admin_schedules  # noqa: E402, F401 - registers those pages
from jobs.workflows import admin as workflow_admin  # noqa: E402, F401 - the workflow pages
