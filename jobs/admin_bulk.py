"""The Jobs list's "Retry / Cancel / Delete all matching" pages, over ``jobs.bulk``.

* ``bulk/<action>/?<the list's filters>`` — GET: a confirmation page with the matching
  count (exact up to 10,000, an estimate beyond); POST: ``bulk_create``, then the progress
  page. Each needs the permission of the single action (``retry_job``, ``cancel_job``,
  ``delete_job``) and the right to view jobs: without them, 403 and nothing is written or
  enqueued.
* ``bulk/operation/<id>/`` — progress (done, failed, of how many), refreshed every two
  seconds until done; needs the right to view jobs.
* the Bulk operations list (``jobs.view_bulkoperation``), read-only, linking to each.
"""

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ERROR_FLAG
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from jobs import bulk
from jobs.models import BulkAction, BulkOperation, BulkStatus
from project.access.permissions import allowed
from project.admin_base import ConveyorModelAdmin

REFRESH_SECONDS = 2
VERBS = {BulkAction.RETRY: "Retry", BulkAction.CANCEL: "Cancel", BulkAction.DELETE: "Delete"}


class BulkAdminMixin:
    """Adds the bulk pages to the Jobs admin (see the module doc)."""

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("bulk/<str:action>/", view(self.bulk_view), name="jobs_job_bulk"),
            path(
                "bulk/operation/<int:operation_id>/",
                view(self.bulk_progress_view),
                name="jobs_job_bulk_progress",
            ),
            *super().get_urls(),
        ]

    def bulk_links(self, request) -> list[dict]:
        """The bulk buttons the user may press, each keeping the list's current filters."""
        filters = bulk.filter_params(request.GET)
        query = urlencode(filters, doseq=True)
        suffix = f"?{query}" if query else ""
        return [
            {
                "verb": VERBS[action],
                "action": action,
                "url": reverse("admin:jobs_job_bulk", args=[action]) + suffix,
            }
            for action in BulkAction
            if allowed(request.user, bulk.PERMISSION[action])
        ]

    def changelist_view(self, request, extra_context=None):
        extra = {"bulk_links": self.bulk_links(request), **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

    def bulk_view(self, request, action: str):
        if action not in BulkAction.values:
            raise Http404("no such bulk action")
        # The list's own right too: the page counts what a filter matches.
        if not (
            allowed(request.user, bulk.PERMISSION[action]) and self.has_view_permission(request)
        ):
            raise PermissionDenied
        source = request.POST if request.method == "POST" else request.GET
        filters = bulk.filter_params(source)
        filters.pop("csrfmiddlewaretoken", None)
        list_url = reverse("admin:jobs_job_changelist")
        if request.method == "POST":
            try:
                operation = bulk.bulk_create(action=action, filters=filters, user=request.user)
            except IncorrectLookupParameters:
                return redirect(f"{list_url}?{ERROR_FLAG}=1")
            self.message_user(
                request,
                f"{VERBS[action]} of {operation.total} matching job(s) started in job "
                f"{operation.job_id}.",
                messages.SUCCESS,
            )
            return redirect("admin:jobs_job_bulk_progress", operation.pk)
        try:
            count = bulk.count_matching(bulk.matching(action, filters, request.user))
        except IncorrectLookupParameters:
            return redirect(f"{list_url}?{ERROR_FLAG}=1")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{VERBS[action]} all matching jobs?",
            "action": action,
            "verb": VERBS[action],
            "count": count,
            "description": bulk.describe_filters(filters),
            "hidden": [(key, value) for key, values in filters.items() for value in values],
            "list_url": f"{list_url}?{urlencode(filters, doseq=True)}",
            "batch_size": bulk.BATCH_SIZE,
            "pause": bulk.PAUSE_SECONDS,
        }
        return TemplateResponse(request, "admin/jobs/job/bulk_confirm.html", context)

    def bulk_progress_view(self, request, operation_id: int):
        if not self.has_view_permission(request):
            raise PermissionDenied
        operation = get_object_or_404(BulkOperation, pk=operation_id)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Bulk {operation.get_action_display().lower()} {operation.pk}",
            "operation": operation,
            "description": bulk.describe_filters(operation.filters),
            "finished": operation.status == BulkStatus.DONE,
            "processed": operation.done + operation.failed,
            "refresh_seconds": REFRESH_SECONDS,
        }
        return TemplateResponse(request, "admin/jobs/job/bulk_progress.html", context)


@admin.register(BulkOperation)
class BulkOperationAdmin(ConveyorModelAdmin):
    """Every bulk operation, newest first, each linking to its progress page (read-only)."""

    list_display = ("id", "progress", "action", "status", "actor", "description", "created_at")
    list_filter = ("action", "status")
    list_per_page = 50
    show_full_result_count = False
    # Not ``filters``: a payload filter's value is for those who may see payloads (the
    # progress page, jobs.view_job); ``description`` shows it as ***.
    fields = readonly_fields = [f.name for f in BulkOperation._meta.fields if f.name != "filters"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # the record of who did what to which jobs: kept

    @admin.display(description="progress")
    def progress(self, operation: BulkOperation):
        return format_html(
            '<a href="{}">{} done, {} failed of {}</a>',
            reverse("admin:jobs_job_bulk_progress", args=[operation.pk]),
            operation.done,
            operation.failed,
            operation.total,
        )
