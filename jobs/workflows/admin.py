"""The console's workflow pages: the list, and one workflow drawn as a graph with its jobs.

Seeing a workflow needs ``jobs.view_job`` (the table's ``workflow.view``), as its jobs do;
cancelling it needs ``jobs.cancel_job`` (``workflow.cancel``). The graph is server-rendered
SVG (jobs.workflows.drawing).
"""

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Exists
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from jobs.errors import IllegalTransition
from jobs.models import Workflow
from jobs.workflows.drawing import svg
from jobs.workflows.state import counts_of, nodes_of, running_jobs, status_of, workflow_cancel
from project.access.permissions import allowed
from project.admin_base import ReadOnlyModelAdmin
from project.timing import seconds_between


class RunningFilter(admin.SimpleListFilter):
    """Running (a job of it has not ended: its finished jobs are kept from the purge) or
    ended, on the list's ``is_running`` (WorkflowAdmin.get_queryset)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return (("running", "running"), ("ended", "ended"))

    def queryset(self, request, queryset):
        if self.value() in ("running", "ended"):
            return queryset.filter(is_running=self.value() == "running")
        return queryset


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyModelAdmin):
    list_display = (
        "id",
        "name",
        "running",
        "failure_rule",
        "node_count",
        "started_by",
        "jobs_link",
        "created_at",
    )
    list_filter = (RunningFilter, "failure_rule")
    search_fields = ("=id", "name", "=started_by")
    ordering = ("-id",)
    list_per_page = 50
    actions = None

    def has_view_permission(self, request, obj=None) -> bool:
        return allowed(request.user, "workflow.view")

    def has_module_permission(self, request) -> bool:
        return allowed(request.user, "workflow.view")

    def get_queryset(self, request):
        """Each workflow with ``is_running``: one probe of its unfinished jobs' index."""
        return super().get_queryset(request).annotate(is_running=Exists(running_jobs()))

    @admin.display(description="running", boolean=True, ordering="is_running")
    def running(self, workflow: Workflow) -> bool:
        return workflow.is_running

    @admin.display(description="jobs")
    def jobs_link(self, workflow: Workflow):
        url = reverse("admin:jobs_job_changelist") + f"?workflow={workflow.pk}"
        return format_html('<a href="{}">its jobs</a>', url)

    def get_urls(self):
        own = [
            path(
                "<path:object_id>/cancel/",
                self.admin_site.admin_view(self.cancel_view),
                name="jobs_workflow_cancel",
            )
        ]
        return own + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """One workflow: its status, its graph, its jobs with their timing and attempts."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        workflow = self._workflow(object_id)
        jobs, edges = nodes_of(workflow)
        counts = counts_of(workflow)
        depends: dict[int, list[int]] = {job.pk: [] for job in jobs}
        for dependant, dependency, _ in edges:
            depends[dependant].append(dependency)
        rows = [
            {
                "job": job,
                "depends_on": depends[job.pk],
                "run_time": seconds_between(job.started_at, job.finished_at),
            }
            for job in jobs[:1000]
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Workflow {workflow.pk}" + (f": {workflow.name}" if workflow.name else ""),
            "opts": self.model._meta,
            "workflow": workflow,
            "status": status_of(workflow, counts),
            "counts": sorted(counts.items()),
            "graph": mark_safe(svg(jobs, edges)),  # noqa: S308 - every text in it is escaped
            "rows": rows,
            "more_rows": max(0, len(jobs) - len(rows)),
            "can_cancel": allowed(request.user, "workflow.cancel")
            and status_of(workflow, counts) == "running",
            "jobs_url": reverse("admin:jobs_job_changelist") + f"?workflow={workflow.pk}",
        }
        return TemplateResponse(request, "admin/jobs/workflow/detail.html", context)

    def cancel_view(self, request, object_id):
        if request.method != "POST":
            return redirect("admin:jobs_workflow_change", object_id)
        if not allowed(request.user, "workflow.cancel"):
            raise PermissionDenied
        workflow = self._workflow(object_id)
        try:
            workflow_cancel(workflow.pk, actor=request.user.get_username())
        except IllegalTransition as exc:  # it ended meanwhile (a second click, a stale page)
            self.message_user(request, str(exc), messages.WARNING)
        else:
            self.message_user(request, f"Cancelled workflow {workflow.pk}.", messages.SUCCESS)
        return redirect("admin:jobs_workflow_change", workflow.pk)

    def _workflow(self, object_id) -> Workflow:
        raw = unquote(str(object_id))
        workflow = (
            Workflow.objects.filter(pk=int(raw)).first()
            if raw.isascii() and raw.isdigit()
            else None
        )
        if workflow is None:
            raise Http404(f"workflow {raw} does not exist")
        return workflow
