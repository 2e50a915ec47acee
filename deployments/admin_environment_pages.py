"""The console's environments: every one a project has deployed to or declared, with rules.

* **The list** (``/admin/deployments/environment/``) shows every environment of every project,
  ruled or not (``history.environment_names``): its protection, freeze, current and latest
  deployment and 30-day DORA figures. Permission: view (or change) environment.
* **An environment's page** (``…/env/<project>/<name>/``) adds its DORA table over 7, 30 and
  90 days, its history (newest first) and **Rollback**, which calls the same service as
  ``POST /api/v1/projects/{slug}/environments/{name}/rollback``
  (``rollback.deployment_rollback``) and needs ``deployments.run_deployment`` (what a
  deploy-scope token is to the API): the page shows the new deployment's link, or why not.
* **Its rules** (``…/rules/``) are a form (``environment_forms``): approvers picked from users
  and groups, freeze windows as rows. Permission: change environment for a ruled one, add
  environment to give an unruled one its first rules.

Every view is POST-only where it changes something, answers 403 without its permission,
and runs under the admin's CSRF protection.
"""

import re
import uuid

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from deployments import dora, history, rollback, selectors
from deployments.environment_forms import DeclareForm, FreezeFormSet, RulesForm, window_rows
from deployments.environments import environment_rules_save, rules_of
from deployments.errors import DeploymentError, EnvironmentNotFound
from deployments.models import Environment, Project
from deployments.validation import clean_environment
from project.access.permissions import allowed
from project.admin_base import ConveyorModelAdmin

CONSOLE_KEY = re.compile(r"[0-9a-f]{32}")
HISTORY_ROWS = 50
DORA_WINDOWS = (7, 30, 90)
LIST_DORA_DAYS = 30
MAX_PROJECTS = 100


@admin.register(Environment)
class EnvironmentAdmin(ConveyorModelAdmin):
    """Environments as pages, not rows: see the module doc."""

    list_display = ("__str__",)
    search_fields = ()

    def get_urls(self):
        view = self.admin_site.admin_view
        here = "env/<slug:slug>/<str:name>/"
        return [
            path(here, view(self.environment_view), name="deployments_environment_page"),
            path(f"{here}rules/", view(self.rules_view), name="deployments_environment_rules"),
            path(
                f"{here}rollback/",
                view(self.rollback_view),
                name="deployments_environment_rollback",
            ),
            *super().get_urls(),
        ]

    # Permissions, one per view or button.
    def may_view(self, request: HttpRequest) -> bool:
        return self.has_view_or_change_permission(request)

    def may_edit_rules(self, request: HttpRequest, rules: Environment) -> bool:
        if rules.pk is None:
            return self.has_add_permission(request)
        return self.has_change_permission(request, rules)

    def may_roll_back(self, request: HttpRequest) -> bool:
        return allowed(request.user, "environment.rollback")

    def _context(self, request: HttpRequest, title: str, **extra) -> dict:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "list_url": reverse("admin:deployments_environment_changelist"),
            **extra,
        }

    def _environment(self, request: HttpRequest, slug: str, name: str, *, new: bool = False):
        """Return (project, canonical name, summary); 404 for an environment that is none.

        With ``new``, a valid name that has neither rules nor deployments yet is one (its
        summary None): the rules form gives it its first rules.
        """
        if not self.may_view(request):
            raise PermissionDenied
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise Http404(f"no project {slug!r}")
        try:
            name = clean_environment(name)
            summary = history.environment_summary(project, name)
        except EnvironmentNotFound as exc:
            if not new:
                raise Http404(str(exc)) from None
            summary = None
        except DeploymentError as exc:  # not a name
            raise Http404(str(exc)) from None
        return project, name, summary

    def changelist_view(self, request, extra_context=None):
        """List every environment of every project (module doc)."""
        if not self.may_view(request):
            raise PermissionDenied
        rows = []
        for project in Project.objects.order_by("slug")[:MAX_PROJECTS]:
            for summary in history.environment_list(project):
                figures = dora.dora_metrics(
                    project=project, environment=summary["name"], days=LIST_DORA_DAYS
                )
                rows.append(
                    {
                        **summary,
                        "project": project.slug,
                        "url": _page_url(project.slug, summary["name"]),
                        "ruled": Environment.objects.filter(
                            project=project, name=summary["name"]
                        ).exists(),
                        "dora": _figures(figures),
                    }
                )
        context = self._context(
            request,
            "Environments",
            rows=rows,
            dora_days=LIST_DORA_DAYS,
            **(extra_context or {}),
        )
        return TemplateResponse(request, "admin/deployments/environment/overview.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """A rules row's page is its environment's page (no raw-JSON form)."""
        rules = self.get_object(request, object_id)
        if rules is None:
            return super().change_view(request, object_id, form_url, extra_context)
        if not self.may_view(request):
            raise PermissionDenied
        return redirect(_page_url(rules.project.slug, rules.name))

    def add_view(self, request, form_url="", extra_context=None):
        """Name an environment (project and name), then give it its first rules."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = DeclareForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            project, name = form.cleaned_data["project"], form.cleaned_data["name"]
            return redirect("admin:deployments_environment_rules", project.slug, name)
        context = self._context(request, "Declare an environment", form=form)
        return TemplateResponse(request, "admin/deployments/environment/declare.html", context)

    def environment_view(self, request: HttpRequest, slug: str, name: str):
        project, name, summary = self._environment(request, slug, name)
        rules = rules_of(project, name)
        deployments = history.environment_history(project, name).order_by("-pk")[:HISTORY_ROWS]
        context = self._context(
            request,
            f"{project.slug} / {name}",
            project=project,
            environment=summary,
            rules=rules,
            ruled=rules.pk is not None,
            freeze_rows=window_rows(rules.freeze),
            dora_rows=[
                {
                    "days": days,
                    **_figures(dora.dora_metrics(project=project, environment=name, days=days)),
                }
                for days in DORA_WINDOWS
            ],
            history=[_history_row(d) for d in deployments],
            can_roll_back=self.may_roll_back(request) and summary["current"] is not None,
            can_edit_rules=self.may_edit_rules(request, rules),
            rollback_url=reverse("admin:deployments_environment_rollback", args=[slug, name]),
            rollback_key=uuid.uuid4().hex,
            rules_url=reverse("admin:deployments_environment_rules", args=[slug, name]),
            lock_url=(
                reverse("admin:deployments_deploylock_changelist")
                + f"?project__id__exact={project.pk}&environment__exact={name}"
                if request.user.has_perm("deployments.view_deploylock")
                else ""
            ),
        )
        return TemplateResponse(request, "admin/deployments/environment/page.html", context)

    def rollback_view(self, request: HttpRequest, slug: str, name: str):
        """Roll the environment back as the API does; say which deployment it made, or why not."""
        project, name, _ = self._environment(request, slug, name)
        if request.method != "POST":
            return redirect(_page_url(slug, name))
        if not self.may_roll_back(request):
            raise PermissionDenied
        try:
            made = rollback.deployment_rollback(
                project=project,
                environment=name,
                triggered_by=request.user.get_username(),
                triggered_by_user=request.user,
                idempotency_key=_console_key(request),
            )
        except DeploymentError as exc:
            self.message_user(request, f"Rollback refused: {exc}", messages.ERROR)
            return redirect(_page_url(slug, name))
        self.message_user(
            request,
            format_html(
                'Rolling back to #{} ({} {}) as <a href="{}" id="rollback-deployment">'
                "deployment #{}</a> ({}).",
                made.rollback_of_id,
                made.ref,
                made.commit_sha[:12],
                reverse("admin:deployments_deployment_change", args=[made.pk]),
                made.pk,
                made.status,
            ),
            messages.SUCCESS,
        )
        return redirect(_page_url(slug, name))

    def rules_view(self, request: HttpRequest, slug: str, name: str):
        """Edit the environment's rules as a form and freeze rows (validated, never a 500)."""
        project, name, summary = self._environment(request, slug, name, new=True)
        rules = rules_of(project, name)
        if not self.may_edit_rules(request, rules):
            raise PermissionDenied
        if request.method == "POST":
            form = RulesForm(request.POST, instance=rules)
            windows = FreezeFormSet(request.POST, prefix="freeze")
            if form.is_valid() and windows.is_valid():
                environment_rules_save(
                    rules=form.save(commit=False),
                    freeze=windows.windows(),
                    changed=form.changed_data,
                    actor=request.user.get_username(),
                )
                self.message_user(request, f"Rules of {project.slug} / {name} saved.")
                return redirect(_page_url(slug, name))
        else:
            form = RulesForm(instance=rules)
            windows = FreezeFormSet(prefix="freeze", initial=window_rows(rules.freeze))
        context = self._context(
            request,
            f"Rules of {project.slug} / {name}",
            project=project,
            name=name,
            form=form,
            windows=windows,
            page_url=_page_url(slug, name)
            if summary is not None
            else reverse("admin:deployments_environment_changelist"),
            errors=bool(form.errors or any(windows.errors) or windows.non_form_errors()),
        )
        return TemplateResponse(request, "admin/deployments/environment/rules.html", context)


def _console_key(request: HttpRequest) -> str | None:
    """Return the idempotency key of the page's Rollback form: a second click makes nothing.

    Each render of the page carries a new key; it is stored as ``console:<user id>:<key>``,
    apart from API tokens' keys (``<token id>:<key>``).
    """
    key = request.POST.get("rollback_key", "")
    return f"console:{request.user.pk}:{key}" if CONSOLE_KEY.fullmatch(key) else None


def _page_url(slug: str, name: str) -> str:
    return reverse("admin:deployments_environment_page", args=[slug, name])


def _figures(metrics: dict) -> dict:
    frequency = metrics["deployment_frequency"]
    return {
        "deployments": frequency["deployments"],
        "per_day": frequency["per_day"],
        "lead_time": _seconds(metrics["lead_time_for_changes"]["median_seconds"]),
        "failure_rate": _rate(metrics["change_failure_rate"]),
        "time_to_restore": _seconds(metrics["time_to_restore"]["median_seconds"]),
    }


def _dora_row(project: Project, name: str, days: int) -> dict:
    return {
        "days": days,
        **_figures(dora.dora_metrics(project=project, environment=name, days=days)),
    }


def _history_row(deployment) -> dict:
    return {
        "deployment": deployment,
        "duration": _seconds(selectors.deployment_duration(deployment)),
        "lineage": _lineage(deployment),
    }


def _lineage(deployment) -> str:
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
