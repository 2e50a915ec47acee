"""Admin for environments: their rules, history and DORA table; approving deployments.

``ApprovalAdminMixin`` gives the deployment page Approve/Reject buttons (and list actions)
for users with the ``deployments.approve_deployment`` permission; each calls the same
service as the API, which audits it.
"""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from deployments import approvals, dora, history, rollback, selectors
from deployments.environments import APPROVE_PERMISSION, Approver
from deployments.errors import ApprovalRefused, DeploymentError
from deployments.models import Deployment, Environment
from project.admin_base import ConveyorModelAdmin

HISTORY_ROWS = 50
DORA_WINDOWS = (7, 30, 90)


def _approver(request: HttpRequest) -> Approver:
    return Approver(name=request.user.get_username(), user=request.user)


class ApprovalAdminMixin:
    """Approve/Reject on a deployment's page and as list actions (permission-checked).

    The page's approval panel (its change_form template) posts ``approval_comment`` here.
    A user without the permission, or whom the environment's rules do not let decide on
    this deployment, gets 403 and nothing is recorded.
    """

    approval_actions = ("approve_deployments", "reject_deployments")

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(APPROVE_PERMISSION)

    def get_urls(self):
        own = [
            path(
                "<int:deployment_id>/approve/",
                self.admin_site.admin_view(self.approve_view),
                name="deployments_deployment_approve",
            ),
            path(
                "<int:deployment_id>/reject/",
                self.admin_site.admin_view(self.reject_view),
                name="deployments_deployment_reject",
            ),
        ]
        return own + super().get_urls()

    def approve_view(self, request: HttpRequest, deployment_id: int):
        return self._decide(request, deployment_id, approvals.deployment_approve, "approved")

    def reject_view(self, request: HttpRequest, deployment_id: int):
        return self._decide(request, deployment_id, approvals.deployment_reject, "rejected")

    def _decide(self, request: HttpRequest, deployment_id: int, service, done: str):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_approve_permission(request):
            raise PermissionDenied
        deployment = get_object_or_404(Deployment, pk=deployment_id)
        try:
            service(
                deployment_id=deployment.pk,
                approver=_approver(request),
                comment=request.POST.get("approval_comment", ""),
            )
            self.message_user(request, f"Deployment {deployment.pk} {done}.", messages.SUCCESS)
        except ApprovalRefused as exc:
            raise PermissionDenied(str(exc)) from exc
        except DeploymentError as exc:
            self.message_user(request, f"Refused: {exc}", messages.WARNING)
        return HttpResponseRedirect(
            reverse("admin:deployments_deployment_change", args=[deployment.pk])
        )

    @admin.action(description="Approve selected deployments", permissions=["approve"])
    def approve_deployments(self, request, queryset) -> None:
        self._each(
            request,
            queryset,
            "approved",
            lambda d: approvals.deployment_approve(deployment_id=d.pk, approver=_approver(request)),
        )

    @admin.action(description="Reject selected deployments", permissions=["approve"])
    def reject_deployments(self, request, queryset) -> None:
        self._each(
            request,
            queryset,
            "rejected",
            lambda d: approvals.deployment_reject(deployment_id=d.pk, approver=_approver(request)),
        )


@admin.register(Environment)
class EnvironmentAdmin(ConveyorModelAdmin):
    list_display = (
        "__str__",
        "protected",
        "required_approvals",
        "wait_timer",
        "frozen_now",
        "current_deployment",
    )
    list_filter = ("protected", "project")
    search_fields = ("name", "project__slug")
    list_select_related = ("project",)
    readonly_fields = ("dora_table", "deployment_history", "created_at", "updated_at")

    @admin.display(description="frozen now")
    def frozen_now(self, environment: Environment) -> str:
        summary = history.environment_summary(environment.project, environment.name)
        frozen = summary["frozen"]
        return f"{frozen['window']} until {frozen['closes_at']:%Y-%m-%d %H:%M}Z" if frozen else ""

    @admin.display(description="current deployment")
    def current_deployment(self, environment: Environment) -> str:
        current = rollback.current_deployment(environment.project, environment.name)
        if current is None:
            return "-"
        return format_html(
            '<a href="{}">#{}</a> {} {}',
            reverse("admin:deployments_deployment_change", args=[current.pk]),
            current.pk,
            current.ref,
            current.commit_sha[:12],
        )

    @admin.display(description="DORA metrics")
    def dora_table(self, environment: Environment) -> str:
        if environment.pk is None:
            return "-"
        rows = []
        for days in DORA_WINDOWS:
            m = dora.dora_metrics(
                project=environment.project, environment=environment.name, days=days
            )
            rows.append(
                (
                    days,
                    f"{m['deployment_frequency']['deployments']} "
                    f"({m['deployment_frequency']['per_day']}/day)",
                    _seconds(m["lead_time_for_changes"]["median_seconds"]),
                    _rate(m["change_failure_rate"]),
                    _seconds(m["time_to_restore"]["median_seconds"]),
                )
            )
        return format_html(
            "<table><tr><th>days</th><th>deployments</th><th>lead time (median)</th>"
            "<th>change failure rate</th><th>time to restore (median)</th></tr>{}</table>",
            format_html_join(
                "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows
            ),
        )

    @admin.display(description="history (newest first)")
    def deployment_history(self, environment: Environment) -> str:
        if environment.pk is None:
            return "-"
        deployments = history.environment_history(environment.project, environment.name)
        rows = (
            (
                reverse("admin:deployments_deployment_change", args=[d.pk]),
                d.pk,
                d.status,
                d.failure_reason or "",
                d.ref,
                d.commit_sha[:12],
                d.triggered_by,
                d.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                _seconds(selectors.deployment_duration(d)),
                _lineage(d),
            )
            for d in deployments.order_by("-pk")[:HISTORY_ROWS]
        )
        return format_html(
            "<table><tr><th>id</th><th>status</th><th>reason</th><th>ref</th><th>commit</th>"
            "<th>by</th><th>created</th><th>duration</th><th>lineage</th></tr>{}</table>",
            format_html_join(
                "",
                '<tr><td><a href="{}">#{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
                "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                rows,
            ),
        )


def _lineage(deployment: Deployment) -> str:
    if deployment.rollback_of_id:
        return f"rollback to #{deployment.rollback_of_id}"
    if deployment.retry_of_id:
        return f"retry of #{deployment.retry_of_id}"
    return ""


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600:
        return f"{value / 3600:.1f}h"
    return f"{value / 60:.1f}m" if value >= 60 else f"{value:.1f}s"


def _rate(rate: dict) -> str:
    if rate["rate"] is None:
        return "-"
    return f"{rate['rate'] * 100:.0f}% ({rate['failed']}/{rate['changes']})"
