"""``GET /metrics``: Prometheus text format, computed from the database at scrape time.

Numbers come from the rows, not from in-process counters, so any web process answers the
same however many web and worker processes run. Access: a bearer API token of admin scope,
or a client address inside ``CONVEYOR_METRICS_ALLOW`` (comma-separated addresses/networks).
"""

import ipaddress
import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, DurationField, F, Sum
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    GaugeMetricFamily,
    HistogramMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.utils import floatToGoString

from deployments.models import Deployment, DeploymentStatus
from jobs import task_states, worker_registry
from jobs.accounting import counts, queues, stats, tallies
from jobs.models import WorkerHeartbeat
from jobs.queues import paused_names
from project.access.auth import verify_bearer
from project.access.models import TokenScope
from project.access.permissions import allowed
from project.api_errors import error_body
from webhooks.models import Delivery, DeliveryAttempt, DeliveryStatus

logger = logging.getLogger(__name__)
# Deployment durations are summarised over this window (finished deployments only).
DURATION_WINDOW = timedelta(hours=24)
# Jobs that ended are summed over this window of the minute rollup.
STATS_WINDOW = timedelta(hours=1)


def _allowed_networks() -> list:
    networks = []
    for item in settings.CONVEYOR_METRICS_ALLOW.split(","):
        if item.strip():
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
    return networks


def refusal(request) -> tuple[int, str, str] | None:
    """Why ``request`` may not read the metrics, as (status, code, message); None if it may.

    An allow-listed client address may, and so may a bearer token of admin scope. The token
    is checked as the API checks it (project.access.auth.verify_bearer): a wrong one counts
    as a failed authentication and a locked-out client gets the same 429. A token that acts
    for a person answers only if that person may see the metrics (``metrics.view``, as the
    dashboard asks).
    """
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        address = None
    if address is not None and any(address in network for network in _allowed_networks()):
        return None
    header = request.headers.get("Authorization", "")
    token = None
    if header.startswith("Bearer "):
        token = verify_bearer(request, header.removeprefix("Bearer ").strip())
    if token is None:
        return 401, "unauthorized", _NEEDED
    if not token.allows(TokenScope.ADMIN):
        return 403, "forbidden", _NEEDED
    if token.user_id is not None and not allowed(token.user, "metrics.view"):
        return 403, "forbidden", "this token's person may not see the metrics"
    return None


_NEEDED = "the metrics need a valid admin token or an address in CONVEYOR_METRICS_ALLOW"


class DatabaseCollector:
    """Yields every Conveyor metric from a handful of grouped queries."""

    def collect(self):
        now = timezone.now()
        yield from self._jobs(now)
        yield from self._flow_control()
        yield from self._deployments(now)
        yield from self._webhooks()
        yield from self._workers(now)
        yield from self._maintenance()
        yield from self._schedules(now)

    def _jobs(self, now):
        found = counts.read()
        jobs = GaugeMetricFamily(
            "conveyor_jobs",
            "Jobs by queue, task and status (exact, from the engine's accounting)",
            labels=["queue", "task", "status"],
        )
        for (queue, task, status), n in sorted(found.items()):
            jobs.add_metric([queue, task, status], n)
        yield jobs
        oldest = GaugeMetricFamily(
            "conveyor_job_oldest_queued_age_seconds",
            "Age of the oldest job due and still queued, per queue",
            labels=["queue"],
        )
        for queue, first in queues.oldest_queued(queues.queue_names(found), now=now).items():
            oldest.add_metric([queue], (now - first).total_seconds())
        yield oldest
        dead = GaugeMetricFamily(
            "conveyor_dead_letters",
            "Dead jobs kept for an operator, per queue: not retried, and not superseded by a "
            "replay or retry of their delivery or deployment (exact, from the tallies)",
            labels=["queue"],
        )
        for queue, n in sorted(tallies.dead_letters_by_queue().items()):
            dead.add_metric([queue], n)
        yield dead
        yield from self._job_stats(now)

    def _flow_control(self):
        paused = GaugeMetricFamily(
            "conveyor_paused", "1 for each paused queue or task", labels=["kind", "name"]
        )
        for name in sorted(paused_names()):
            paused.add_metric(["queue", name], 1)
        for name in sorted(task_states.paused_names()):
            paused.add_metric(["task", name], 1)
        yield paused
        limit = GaugeMetricFamily(
            "conveyor_task_concurrency_limit",
            "The most jobs of a task running at once everywhere (its declared limit)",
            labels=["task"],
        )
        running = GaugeMetricFamily(
            "conveyor_task_running", "Running jobs of each limited task (exact)", labels=["task"]
        )
        held = GaugeMetricFamily(
            "conveyor_task_rate_held",
            "scope=task: 1 while the task's rate window is full; scope=keys: how many of its "
            "keys have a full window now",
            labels=["task", "scope"],
        )
        for task in task_states.describe():
            if task["limit"] is None:
                continue
            if task["limit"]["concurrency"] is not None:
                limit.add_metric([task["name"]], task["limit"]["concurrency"])
            running.add_metric([task["name"]], task["running"])
            if task["limit"]["rate"]:
                held.add_metric([task["name"], "task"], int(task["rate_full_until"] is not None))
            if task["limit"]["key_rate"]:
                held.add_metric([task["name"], "keys"], task["keys_rate_held"])
        yield from (limit, running, held)

    def _job_stats(self, now):
        ended = stats.ended_since(now - STATS_WINDOW)
        finished = GaugeMetricFamily(
            "conveyor_jobs_ended_last_hour",
            "Jobs that ended in the last hour, by queue, task and final status "
            "(an estimate, from the per-minute rollup)",
            labels=["queue", "task", "status"],
        )
        for (queue, task, status), figures in sorted(ended.items()):
            finished.add_metric([queue, task, status], figures.count)
        yield finished
        yield from _histograms()

    def _deployments(self, now):
        yield _by_status(
            "conveyor_deployments", "Deployments by status", Deployment, DeploymentStatus
        )
        durations = SummaryMetricFamily(
            "conveyor_deployment_duration_seconds",
            "Run time of deployments that finished in the last 24 hours, by status",
            labels=["status"],
        )
        rows = (
            Deployment.objects.filter(
                finished_at__gte=now - DURATION_WINDOW, started_at__isnull=False
            )
            .values("status")
            .annotate(
                n=Count("pk"),
                total=Sum(F("finished_at") - F("started_at"), output_field=DurationField()),
            )
            .order_by()
        )
        for row in rows:
            total = row["total"].total_seconds() if row["total"] else 0.0
            durations.add_metric([row["status"]], row["n"], total)
        yield durations

    def _webhooks(self):
        yield _by_status(
            "conveyor_webhook_deliveries", "Webhook deliveries by status", Delivery, DeliveryStatus
        )
        attempts = GaugeMetricFamily(
            "conveyor_webhook_delivery_attempts",
            "Webhook delivery attempts kept, by outcome",
            labels=["outcome"],
        )
        rows = DeliveryAttempt.objects.values_list("outcome").annotate(n=Count("pk")).order_by()
        for outcome, n in rows:
            attempts.add_metric([outcome], n)
        yield attempts

    def _workers(self, now):
        cutoff = worker_registry.gone_before(now)
        alive = WorkerHeartbeat.objects.filter(last_seen_at__gte=cutoff, stopped_at__isnull=True)
        gauge = GaugeMetricFamily("conveyor_workers_alive", "Workers with a recent heartbeat")
        gauge.add_metric([], alive.count())
        yield gauge

    def _maintenance(self):
        from jobs.selectors import maintenance_status

        now = timezone.now()
        age = GaugeMetricFamily(
            "conveyor_maintenance_last_run_age_seconds",
            "Seconds since each maintenance runner last completed a run",
            labels=["runner"],
        )
        overdue = GaugeMetricFamily(
            "conveyor_maintenance_overdue",
            "1 when a runner has not completed within three of its intervals",
            labels=["runner"],
        )
        for runner in maintenance_status(now=now):
            if runner["last_run_at"] is not None:
                seconds = (now - runner["last_run_at"]).total_seconds()
                age.add_metric([runner["runner"]], seconds)
            overdue.add_metric([runner["runner"]], 1 if runner["overdue"] else 0)
        yield age
        yield overdue

    def _schedules(self, now):
        from jobs.schedules import selectors

        age = GaugeMetricFamily(
            "conveyor_schedule_last_success_age_seconds",
            "Seconds since each schedule's latest successful run ended (since the schedule "
            "was installed when none has succeeded): alert on one that stopped",
            labels=["schedule"],
        )
        installed = selectors.created_at()
        for name, finished_at in sorted(selectors.last_successes().items()):
            since = finished_at or installed[name]
            age.add_metric([name], max(0.0, (now - since).total_seconds()))
        yield age


def _histograms():
    """The job run-time and queue-wait histograms: cumulative since the tallies began, exact."""
    for name, what, series in (
        ("conveyor_job_runtime_seconds", "Run time (finished - started)", tallies.RUN_TIME),
        ("conveyor_job_wait_seconds", "Wait in the queue (claim - due)", tallies.WAIT_TIME),
    ):
        family = HistogramMetricFamily(
            name,
            f"{what} of the last attempt of every job that reached a final state after "
            "running, by queue and task (exact, cumulative: counted by the database when "
            "the job ended)",
            labels=["queue", "task"],
        )
        for (queue, task), histogram in sorted(tallies.histograms(series).items()):
            buckets = [
                (floatToGoString(bound), histogram.buckets[i])
                for i, bound in enumerate(tallies.BOUNDS)
            ]
            buckets.append(("+Inf", histogram.buckets[-1]))
            family.add_metric([queue, task], buckets, histogram.total)
        yield family


def _by_status(name: str, documentation: str, model, statuses) -> GaugeMetricFamily:
    """Rows of ``model`` per status, every status present (0 when none)."""
    family = GaugeMetricFamily(name, documentation, labels=["status"])
    found = dict(model.objects.values_list("status").annotate(n=Count("pk")).order_by())
    for status in statuses.values:
        family.add_metric([status], found.get(status, 0))
    return family


@require_GET
def metrics(request):
    """Serve the Prometheus text exposition of Conveyor's state."""
    refused = refusal(request)
    if refused is not None:  # the API's error shape, as a scraper logs it
        status, code, message = refused
        return JsonResponse(error_body(code, message), status=status)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
