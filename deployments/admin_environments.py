"""Approving deployments from the console (the environments pages: admin_environment_pages).

``ApprovalAdminMixin`` gives the deployment page Approve/Reject buttons (and list actions)
for users with the ``deployments.approve_deployment`` permission; each calls the same
service as the API, which audits it.
"""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse

from deployments import approvals
from deployments.environments import APPROVE_PERMISSION, Approver
from deployments.errors import ApprovalRefused, DeploymentError
from deployments.models import Deployment


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
