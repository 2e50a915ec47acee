"""Admin: projects and pipelines to configure; deployments, step runs and logs to inspect.

Cancel and retry are admin actions that call the same services as the API.
"""

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from deployments import (
    admin_deploy_locks,  # noqa: F401 - registers the deploy lock admin
    recovery,
    services,
    timeline,
)
from deployments.admin_environments import ApprovalAdminMixin
from deployments.admin_logs import LogViewsMixin
from deployments.approval_status import approval_status
from deployments.deploy_locks import current_lock
from deployments.errors import DeploymentError
from deployments.models import (
    FINISHED,
    Deployer,
    Deployment,
    DeploymentStatus,
    Pipeline,
    Project,
    Step,
    StepRun,
    Workspace,
    Worktree,
)
from project.access.permissions import allowed
from project.admin_base import ConveyorModelAdmin
from project.admin_permissions import permission_check
from project.redaction import redact_url, url_password
from project.timing import seconds_between

# How many links of the retry_of chain the page follows back.
CHAIN_LIMIT = 20
REFRESH_SECONDS = 2
# The newest recoveries of a deployment its page lists, with their progress.
RECOVERIES_SHOWN = 5
# A page waiting for approval has no log to follow; it only checks, this often, whether
# somebody else decided.
STATUS_CHECK_SECONDS = 10


class PipelineInline(admin.TabularInline):
    model = Pipeline
    fields = ("name", "description")
    extra = 0
    show_change_link = True


@admin.register(Project)
class ProjectAdmin(ConveyorModelAdmin):
    list_display = (
        "slug",
        "name",
        "repository",
        "concurrency_policy",
        "default_environment",
        "runs_on",
    )
    search_fields = ("slug", "name")  # never the repo URL: it may carry a password
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
class PipelineAdmin(ConveyorModelAdmin):
    list_display = ("__str__", "project", "name", "updated_at")
    list_filter = ("project",)
    search_fields = ("name", "project__slug")
    inlines = [StepInline]


@admin.register(Deployment)
class DeploymentAdmin(LogViewsMixin, ApprovalAdminMixin, ConveyorModelAdmin):
    list_display = (
        "id",
        "project",
        "environment",
        "ref",
        "short_sha",
        "status_pill",
        "failure_reason",
        "health_status",
        "triggered_by_short",
        "created_at",
        "duration",
    )
    # No date_hierarchy: its month list reads every deployment. A date filter is a range.
    list_filter = (
        "status",
        "failure_reason",
        "environment",
        "project",
        ("created_at", admin.DateFieldListFilter),
    )
    search_fields = ("=id", "ref", "commit_sha", "triggered_by")
    list_select_related = ("project",)
    actions = ("cancel_deployments", "retry_deployments", *ApprovalAdminMixin.approval_actions)
    change_form_template = "admin/deployments/deployment/change_form.html"
    readonly_fields = tuple(f.name for f in Deployment._meta.concrete_fields)
    fieldsets = (
        (
            "Details",
            {
                "classes": ("collapse",),
                "fields": (
                    ("pipeline_name", "commit_sha", "committed_at", "triggered_by"),
                    ("rollback_of", "undoes"),
                    ("job_id", "worker", "project_dir"),
                    "params",
                    "steps",
                ),
            },
        ),
    )

    def has_add_permission(self, request) -> bool:
        return False  # deployments are created through the API or a retry

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a record of what ran: read-only; retry and cancel are buttons

    def has_retry_permission(self, request, obj=None) -> bool:
        return allowed(request.user, "deployment.retry")

    def has_cancel_permission(self, request, obj=None) -> bool:
        return allowed(request.user, "deployment.cancel")

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<int:deployment_id>/retry/",
                view(self.retry_view),
                name="deployments_deployment_retry",
            ),
            path(
                "<int:deployment_id>/cancel/",
                view(self.cancel_view),
                name="deployments_deployment_cancel",
            ),
            path(
                "<int:deployment_id>/recover/",
                view(self.recover_view),
                name="deployments_deployment_recover",
            ),
            *self.log_urls(),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        deployment = self.get_object(request, unquote(object_id))
        if deployment is None:  # no such deployment, or not an id: Django's redirect
            return super().change_view(request, object_id, form_url, extra_context)
        extra = {
            "title": f"{deployment.project.slug} / {deployment.environment} @ {deployment.ref}",
            "deployment": deployment,
            "finished": deployment.status in FINISHED,
            "live_state": _live_state(deployment),
            "refresh_seconds": REFRESH_SECONDS,
            "status_check_seconds": STATUS_CHECK_SECONDS,
            "approval": approval_status(deployment, user=request.user),
            "deploy_lock": current_lock(deployment.project, deployment.environment),
            "approve_url": reverse("admin:deployments_deployment_approve", args=[deployment.pk]),
            "reject_url": reverse("admin:deployments_deployment_reject", args=[deployment.pk]),
            "can_retry": deployment.status in FINISHED and self.has_retry_permission(request),
            "can_cancel": deployment.status not in FINISHED and self.has_cancel_permission(request),
            "step_runs": _step_runs(deployment),
            "timeline": timeline.deployment_timeline(
                deployment, show_webhook_urls=allowed(request.user, "endpoint.view")
            ),
            "chain": _retry_chain(deployment),
            "health": deployment.health or None,
            "can_recover": deployment.finished_at is not None
            and allowed(request.user, "deployment.recover"),
            "recoveries": list(deployment.recoveries.order_by("-pk")[:RECOVERIES_SHOWN]),
            "retries": list(deployment.retries.order_by("pk").values_list("pk", "status")),
            **self.log_context(deployment),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, extra)

    def _button(self, request, deployment_id: int, permission: str, call, done: str):
        if request.method != "POST":
            return redirect("admin:deployments_deployment_change", deployment_id)
        if not allowed(request.user, permission):
            raise PermissionDenied
        try:
            result = call(deployment_id, request.user.get_username())
        except DeploymentError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return redirect("admin:deployments_deployment_change", deployment_id)
        self.message_user(request, done.format(result=result), messages.SUCCESS)
        return redirect("admin:deployments_deployment_change", result.pk)

    def retry_view(self, request, deployment_id: int):
        return self._button(
            request,
            deployment_id,
            "deployment.retry",
            lambda pk, user: services.deployment_retry(
                deployment_id=pk, triggered_by=user, triggered_by_user=request.user
            ),
            "Retried as deployment {result.pk}.",
        )

    def cancel_view(self, request, deployment_id: int):
        return self._button(
            request,
            deployment_id,
            "deployment.cancel",
            lambda pk, user: services.deployment_cancel(deployment_id=pk, actor=user),
            "Deployment {result.pk} is {result.status}.",
        )

    def recover_view(self, request, deployment_id: int):
        """Confirm (a dry-run count) then start the recovery of a deployment's failures."""
        if not (allowed(request.user, "deployment.recover") and self.has_view_permission(request)):
            raise PermissionDenied
        deployment = get_object_or_404(Deployment, pk=deployment_id)
        try:
            if request.method == "POST":
                made = recovery.recovery_create(
                    deployment, actor=request.user.get_username(), user=request.user
                )
                self.message_user(
                    request,
                    f"Recovery {made.pk} of {made.jobs_total} job(s) and "
                    f"{made.deliveries_total} delivery(ies) started in job {made.job_id}.",
                    messages.SUCCESS,
                )
                return redirect("admin:deployments_deployment_change", deployment.pk)
            counted = recovery.recovery_count(deployment)
        except DeploymentError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return redirect("admin:deployments_deployment_change", deployment.pk)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Recover the failures after deployment {deployment.pk}?",
            "deployment": deployment,
            "counted": counted,
            "batch_size": recovery.BATCH_SIZE,
            "pause": recovery.PAUSE_SECONDS,
        }
        return TemplateResponse(
            request, "admin/deployments/deployment/recover_confirm.html", context
        )

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # history; old logs go with the log purge, the rows stay

    class Media:
        css = {"all": ("console/console.css",)}  # the status pills, one line per row
        js = ("console/wide_list.js",)  # the sidebar starts closed: the list needs the width

    @admin.display(description="status", ordering="status")
    def status_pill(self, deployment: Deployment):
        # A class, not a style attribute: the console's CSP allows no inline style.
        return format_html('<b class="pill {}">{}</b>', deployment.status, deployment.status)

    @admin.display(description="triggered by", ordering="triggered_by")
    def triggered_by_short(self, deployment: Deployment):
        return format_html(
            '<span class="clip" title="{}">{}</span>',
            deployment.triggered_by,
            deployment.triggered_by,
        )

    @admin.display(description="health")
    def health_status(self, deployment: Deployment) -> str:
        """The health gate's verdict (deployments.health), or empty without a gate."""
        return (deployment.health or {}).get("status", "")

    has_run_deployment_permission = permission_check("run_deployment")
    has_cancel_deployment_permission = permission_check("cancel_deployment")

    @admin.display(description="commit")
    def short_sha(self, deployment: Deployment) -> str:
        return deployment.commit_sha[:12]

    @admin.display(description="duration")
    def duration(self, deployment: Deployment) -> str:
        seconds = seconds_between(deployment.started_at, deployment.finished_at, digits=1)
        return "" if seconds is None else f"{seconds:.1f}s"

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
                deployment_id=d.pk,
                triggered_by=request.user.username,
                triggered_by_user=request.user,
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


def _live_state(deployment: Deployment) -> str:
    """Say what the page's script follows: "finished", "waiting" (for approval) or "live"."""
    if deployment.status in FINISHED:
        return "finished"
    return "waiting" if deployment.status == DeploymentStatus.WAITING_APPROVAL else "live"


def _step_runs(deployment: Deployment) -> list[StepRun]:
    runs = list(StepRun.objects.filter(deployment=deployment).order_by("position"))
    for run in runs:
        run.duration_seconds = seconds_between(run.started_at, run.finished_at)
    return runs


def _retry_chain(deployment: Deployment) -> list[Deployment]:
    """Return the deployments this one retries, nearest first (at most CHAIN_LIMIT)."""
    chain, current = [], deployment
    while current.retry_of_id and len(chain) < CHAIN_LIMIT:
        current = Deployment.objects.filter(pk=current.retry_of_id).first()
        if current is None:
            break
        chain.append(current)
    return chain


class WorktreeInline(admin.TabularInline):
    model = Worktree
    fields = ("commit_sha", "path", "last_used_at", "prune_warning_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Workspace)
class WorkspaceAdmin(ConveyorModelAdmin):
    list_display = (
        "project",
        "host",
        "repository",
        "path",
        "last_fetched_at",
        "last_fetch_error",
        "gone_at",
    )
    list_filter = ("host",)
    readonly_fields = (
        "project",
        "host",
        "repository",
        "path",
        "last_fetched_at",
        "last_fetch_error",
        "gone_at",
    )
    exclude = ("repo",)

    @admin.display(description="repo")
    def repository(self, workspace: Workspace) -> str:
        return redact_url(workspace.repo)

    inlines = [WorktreeInline]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Deployer)
class DeployerAdmin(ConveyorModelAdmin):
    list_display = ("host", "tags", "free_disk", "last_seen_at", "gone_at", "workspaces_dir")
    list_filter = (("gone_at", admin.EmptyFieldListFilter),)
    readonly_fields = (
        "host",
        "tags",
        "workspaces_dir",
        "free_disk",
        "started_at",
        "last_seen_at",
        "gone_at",
    )
    exclude = ("free_disk_bytes",)

    @admin.display(description="free disk", ordering="free_disk_bytes")
    def free_disk(self, deployer: Deployer) -> str:
        return filesizeformat(deployer.free_disk_bytes) if deployer.free_disk_bytes else "–"

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Worktree)
class WorktreeAdmin(ConveyorModelAdmin):
    list_display = ("commit_sha", "workspace", "host", "path", "last_used_at", "prune_warning_at")
    list_filter = ("workspace__host", "workspace")
    list_select_related = ("workspace",)
    readonly_fields = ("workspace", "commit_sha", "path", "created_at", "last_used_at")

    @admin.display(description="host", ordering="workspace__host")
    def host(self, worktree: Worktree) -> str:
        return worktree.workspace.host

    def has_add_permission(self, request) -> bool:
        return False


from deployments import admin_environment_pages  # noqa: E402, F401 - registers the environments pages
