"""Admin: projects and pipelines to configure; deployments, step runs and logs to inspect.

Cancel and retry are admin actions that call the same services as the API.
"""

from django.contrib import admin, messages
from django.utils.html import format_html

from deployments import selectors, services
from deployments.admin_environments import ApprovalAdminMixin
from deployments.errors import DeploymentError
from deployments.models import Deployment, Pipeline, Project, Step, StepRun, Workspace, Worktree
from project.admin_permissions import permission_check
from project.redaction import redact_url, url_password

LOG_TAIL_BYTES = 256 * 1024


class PipelineInline(admin.TabularInline):
    model = Pipeline
    fields = ("name", "description")
    extra = 0
    show_change_link = True


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "repository", "concurrency_policy", "default_environment")
    search_fields = ("slug", "name", "repo")
    list_filter = ("concurrency_policy",)
    # Secret values are never shown; set them with apply_projects (from_env).
    exclude = ("secrets",)
    readonly_fields = ("secret_names", "created_at", "updated_at")
    inlines = [PipelineInline]

    @admin.display(description="secrets")
    def secret_names(self, project: Project) -> str:
        return ", ".join(sorted(project.secrets or {})) or "(none)"

    @admin.display(description="repo", ordering="repo")
    def repository(self, project: Project) -> str:
        return redact_url(project.repo)

    # A repo URL that carries a password is shown redacted and read-only, never in an input.
    def get_exclude(self, request, obj=None):
        exclude = list(super().get_exclude(request, obj) or ())
        return [*exclude, "repo"] if obj is not None and url_password(obj.repo) else exclude

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "repository"] if obj is not None and url_password(obj.repo) else fields


class StepInline(admin.TabularInline):
    model = Step
    fields = ("position", "name", "command", "timeout", "env", "continue_on_error")
    extra = 0
    ordering = ("position",)


@admin.register(Pipeline)
class PipelineAdmin(admin.ModelAdmin):
    list_display = ("__str__", "project", "name", "updated_at")
    list_filter = ("project",)
    search_fields = ("name", "project__slug")
    inlines = [StepInline]


class StepRunInline(admin.TabularInline):
    model = StepRun
    fields = ("position", "name", "status", "exit_code", "started_at", "finished_at", "log_range")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("position",)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="log bytes")
    def log_range(self, run: StepRun) -> str:
        if run.log_start is None:
            return "-"
        return f"{run.log_start}-{run.log_end if run.log_end is not None else '…'}"


@admin.register(Deployment)
class DeploymentAdmin(ApprovalAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "project",
        "environment",
        "ref",
        "short_sha",
        "pipeline_name",
        "status",
        "failure_reason",
        "attempt",
        "triggered_by",
        "created_at",
        "duration",
    )
    list_filter = ("status", "failure_reason", "environment", "project")
    search_fields = ("=id", "ref", "commit_sha", "triggered_by")
    list_select_related = ("project",)
    date_hierarchy = "created_at"
    actions = ("cancel_deployments", "retry_deployments", *ApprovalAdminMixin.approval_actions)
    inlines = [StepRunInline]
    readonly_fields = (
        *(f.name for f in Deployment._meta.concrete_fields),
        "log",
        "approval_panel",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("project", "environment", "ref", "commit_sha"),
                    ("pipeline_name", "status", "failure_reason", "error"),
                    ("attempt", "retry_of", "rollback_of", "undoes", "triggered_by"),
                    ("created_at", "started_at", "cancel_requested_at", "finished_at"),
                    ("job_id", "worker", "project_dir", "committed_at"),
                    "params",
                    "steps",
                )
            },
        ),
        ("Approval", {"fields": ("approval_panel",)}),
        ("Log", {"fields": ("log",)}),
    )

    def has_add_permission(self, request) -> bool:
        return False  # deployments are created through the API or a retry

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # history; old logs go with the log purge, the rows stay

    has_run_deployment_permission = permission_check("run_deployment")
    has_cancel_deployment_permission = permission_check("cancel_deployment")

    @admin.display(description="commit")
    def short_sha(self, deployment: Deployment) -> str:
        return deployment.commit_sha[:12]

    @admin.display(description="duration")
    def duration(self, deployment: Deployment) -> str:
        if deployment.started_at and deployment.finished_at:
            return f"{(deployment.finished_at - deployment.started_at).total_seconds():.1f}s"
        return ""

    @admin.display(description="log")
    def log(self, deployment: Deployment) -> str:
        size = selectors.deployment_log_size(deployment=deployment)
        start = max(0, size - LOG_TAIL_BYTES)
        page = selectors.deployment_logs(
            deployment=deployment, offset=start, limit_bytes=LOG_TAIL_BYTES
        )
        note = f"last {LOG_TAIL_BYTES // 1024} KiB of {size} bytes\n" if start else ""
        return format_html(
            '<pre style="max-height:40em;overflow:auto;white-space:pre-wrap">{}{}</pre>',
            note,
            page["text"],
        )

    @admin.action(description="Cancel selected deployments", permissions=["cancel_deployment"])
    def cancel_deployments(self, request, queryset) -> None:
        self._each(
            request,
            queryset,
            "cancelled (or asked to stop)",
            lambda d: services.deployment_cancel(deployment_id=d.pk, actor=request.user.username),
        )

    @admin.action(
        description="Retry selected deployments (as new deployments)",
        permissions=["run_deployment"],
    )
    def retry_deployments(self, request, queryset) -> None:
        self._each(
            request,
            queryset,
            "retried",
            lambda d: services.deployment_retry(
                deployment_id=d.pk, triggered_by=request.user.username
            ),
        )

    def _each(self, request, queryset, done: str, action) -> None:
        succeeded, refused = 0, []
        for deployment in queryset.order_by("pk"):
            try:
                action(deployment)
                succeeded += 1
            except DeploymentError as exc:
                refused.append(f"{deployment.pk}: {exc}")
        if succeeded:
            self.message_user(request, f"{succeeded} deployment(s) {done}.", messages.SUCCESS)
        if refused:
            self.message_user(request, "Refused: " + "; ".join(refused), messages.WARNING)


class WorktreeInline(admin.TabularInline):
    model = Worktree
    fields = ("commit_sha", "path", "last_used_at", "prune_warning_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("project", "repository", "path", "last_fetched_at", "last_fetch_error")
    readonly_fields = ("project", "repository", "path", "last_fetched_at", "last_fetch_error")
    exclude = ("repo",)

    @admin.display(description="repo")
    def repository(self, workspace: Workspace) -> str:
        return redact_url(workspace.repo)

    inlines = [WorktreeInline]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Worktree)
class WorktreeAdmin(admin.ModelAdmin):
    list_display = ("commit_sha", "workspace", "path", "last_used_at", "prune_warning_at")
    list_filter = ("workspace",)
    readonly_fields = ("workspace", "commit_sha", "path", "created_at", "last_used_at")

    def has_add_permission(self, request) -> bool:
        return False
