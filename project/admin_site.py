"""The console's admin site: the stock Django admin with a live dashboard as its first page.

The app list (the index and the sidebar) leads with a "Console" section holding the console's
own pages (the dashboard and the Tasks pages), shown only to users who may see them, and keeps
the plumbing (django-celery-results, the beat schedules) out of the way in one "Plumbing"
section at the end.
"""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse

from project import charts, dashboard, task_runtimes
from project.access.permissions import allowed
from project.api_errors import error_body

PLUMBING_APPS = ("django_celery_results", "django_celery_beat")
# Beat models nobody here schedules with: hidden from the index (still reachable by URL).
HIDDEN_MODELS = {("django_celery_beat", "clockedschedule"), ("django_celery_beat", "solarschedule")}
REFRESH_SECONDS = 3
# The parts of the dashboard its refresh re-renders (templates admin/console/dashboard/*.html,
# each inside the element with id dashboard-<name>).
DASHBOARD_PARTS = (
    "stamp",
    "queues",
    "tasks",
    "chart",
    "workers",
    "deployers",  # deployer hosts
    "deployments",
    "approvals",  # deployments waiting for approval
    "maintenance",
    "runtimes",  # the busiest and slowest tasks of the hour (project.task_runtimes)
)
QUEUE_FIGURES = (
    "queue",
    "queued",
    "running",
    "retrying",
    "dead_letters",
    "oldest_age",
    "broker_depth",
)


class ConsoleAdminSite(admin.AdminSite):
    site_header = "Conveyor console"
    site_title = "Conveyor"
    index_title = "Conveyor"
    site_url = "/admin/dashboard/"

    def get_urls(self):
        return [
            path("dashboard/", self.admin_view(self.dashboard_view), name="dashboard"),
            path(
                "dashboard/data.json",
                self.admin_view(self.dashboard_data_view),
                name="dashboard_data",
            ),
            path("tasks/", self.admin_view(self.tasks_view), name="console_tasks"),
            path("tasks/<path:task>/", self.admin_view(self.task_view), name="console_task"),
            *super().get_urls(),
        ]

    def each_context(self, request):
        context = super().each_context(request)
        if not allowed(request.user, "metrics.view"):
            context["site_url"] = None  # "View site" is the dashboard: not for them
        return context

    def get_app_list(self, request, app_label=None):
        apps = super().get_app_list(request, app_label)
        if app_label is not None:
            return apps
        main, plumbing, plumbing_url = self._console_section(request), [], None
        for app in apps:
            if app["app_label"] in PLUMBING_APPS:
                plumbing += [
                    model
                    for model in app["models"]
                    if (app["app_label"], model["object_name"].lower()) not in HIDDEN_MODELS
                ]
                plumbing_url = plumbing_url or app["app_url"]
            else:
                main.append(app)
        if plumbing:
            main.append(
                {
                    "name": "Plumbing (Celery results and beat schedules)",
                    "app_label": "django_celery_beat",
                    # One of its apps' pages: an empty app_url is "in" every path, and the
                    # sidebar would mark the section current on every page.
                    "app_url": plumbing_url,
                    "has_module_perms": True,
                    "models": plumbing,
                }
            )
        return main

    def _console_section(self, request) -> list[dict]:
        """The console's own pages as an app-list section, for those allowed to see them."""
        if not allowed(request.user, "metrics.view"):
            return []
        url = reverse("admin:dashboard", current_app=self.name)
        pages = [
            {
                "name": name,
                "object_name": name.replace(" ", ""),
                "admin_url": reverse(view, current_app=self.name),
                "add_url": None,
                "view_only": True,  # the index offers "View", not "Change"
                "perms": {"view": True},
            }
            for name, view in (("Dashboard", "admin:dashboard"), ("Tasks", "admin:console_tasks"))
        ]
        return [
            {
                "name": "Console",
                "app_label": "console",
                "app_url": url,
                "has_module_perms": True,
                "models": pages,
            }
        ]

    def dashboard_view(self, request):
        """The live dashboard: queues, charts, workers, deployments in flight."""
        context = self._dashboard_context(request)
        return TemplateResponse(request, "admin/console/dashboard.html", context)

    def dashboard_data_view(self, request):
        """The dashboard's 3-second refresh: each live part re-rendered, and the queue figures."""
        if not allowed(request.user, "metrics.view"):
            body = error_body("forbidden", "the dashboard needs the metrics.view permission")
            return JsonResponse(body, status=403)
        context = self._dashboard_context(request)
        parts = {
            f"dashboard-{name}": render_to_string(
                f"admin/console/dashboard/{name}.html", context, request=request
            )
            for name in DASHBOARD_PARTS
        }
        queues = [{key: row[key] for key in QUEUE_FIGURES} for row in context["queues"]]
        return JsonResponse(
            {"now": context["now"], "queues": queues, "parts": parts},
            headers={"Cache-Control": "no-store"},
        )

    def tasks_view(self, request):
        """Every task's executions, failures, run time and queue wait over an hour or a day."""
        if not allowed(request.user, "metrics.view"):
            raise PermissionDenied
        window = task_runtimes.window_of(request.GET.get("window"))
        queue = request.GET.get("queue") or None
        rows, queues = task_runtimes.task_rows(window, queue=queue)
        context = {
            **self.each_context(request),
            "title": "Tasks",
            "window": window,
            "windows": list(task_runtimes.WINDOWS),
            "queue": queue,
            "queues": sorted({*queues, queue} - {None}),
            "rows": rows,
        }
        return TemplateResponse(request, "admin/console/tasks.html", context)

    def task_view(self, request, task):
        """One task's figures per queue and its charts: executions, run time, queue wait."""
        if not allowed(request.user, "metrics.view"):
            raise PermissionDenied
        window = task_runtimes.window_of(request.GET.get("window"))
        detail = task_runtimes.task_detail(task, window)
        points = detail["points"]
        label_every = 10 if window == "1h" else 3
        timed = [("run_p50", "p50", charts.P50_COLOR), ("run_p95", "p95", charts.P95_COLOR)]
        waited = [("wait_p50", "p50", charts.P50_COLOR), ("wait_p95", "p95", charts.P95_COLOR)]
        bars = [{"at": p["at"], "succeeded": p["succeeded"], "failed": p["failed"]} for p in points]
        context = {
            **self.each_context(request),
            "title": f"Task {task}",
            "windows": list(task_runtimes.WINDOWS),
            "detail": detail,
            "window": window,
            "executions_svg": charts.stacked_bars(bars, label_every=label_every),
            "run_time_svg": charts.lines(points, timed, label_every=label_every),
            "wait_time_svg": charts.lines(points, waited, label_every=label_every),
        }
        return TemplateResponse(request, "admin/console/task.html", context)

    def _dashboard_context(self, request) -> dict:
        if not allowed(request.user, "metrics.view"):
            raise PermissionDenied
        range_name = request.GET.get("range", "1h")
        data = dashboard.dashboard(range_name)
        points = data["chart"]["points"]
        label_every = 10 if data["chart"]["range"] == "1h" else 3
        fmt = "%H:%M"
        return {
            **self.each_context(request),
            "title": "Dashboard",
            "refresh_seconds": REFRESH_SECONDS,
            "refresh_url": reverse("admin:dashboard_data") + f"?range={data['chart']['range']}",
            "chart_svg": charts.stacked_bars(points, label_every=label_every, fmt=fmt),
            "chart_total_ok": sum(p["succeeded"] for p in points),
            "chart_total_failed": sum(p["failed"] for p in points),
            "ranges": list(dashboard.RANGES),
            "runtimes": task_runtimes.panel(data["now"]),
            **data,
        }
