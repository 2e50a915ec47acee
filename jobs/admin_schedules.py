"""The console's schedules page: when each runs next, how its last runs went, and actions.

Rows come from code (``setup_periodic_tasks`` reconciles them): nothing is added or edited
here. Pause and resume need ``jobs.pause_schedule``, run now needs ``jobs.run_schedule``;
each goes through jobs.schedules.services and is audited.
"""

from datetime import UTC, timedelta

from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from jobs.models import Schedule
from jobs.schedules import selectors, services
from jobs.schedules.slots import next_slots
from project.admin_base import ReadOnlyModelAdmin
from project.admin_permissions import permission_check
from project.timing import seconds_between

NEXT_SHOWN = 3
RUNS_SHOWN = 3


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyModelAdmin):
    list_display = ("name", "task", "when", "state", "next_slots", "last_runs", "missed_policy")
    list_per_page = 50
    search_fields = ("name", "task")
    actions = ["pause_selected", "resume_selected", "run_selected_now"]
    readonly_fields = [f.name for f in Schedule._meta.fields]

    has_pause_schedule_permission = permission_check("pause_schedule")
    has_run_schedule_permission = permission_check("run_schedule")

    @admin.display(description="state")
    def state(self, row: Schedule) -> str:
        if not row.enabled:
            return "disabled in code"
        if row.paused_at is not None:
            return f"paused by {row.paused_by or 'someone'}"
        return "active"

    @admin.display(description=f"next {NEXT_SHOWN} slots (zone · UTC)")
    def next_slots(self, row: Schedule) -> str:
        if not row.enabled or row.paused_at is not None or row.next_slot is None:
            return "—"
        after = row.next_slot - timedelta(microseconds=1)
        slots = next_slots(row, after, NEXT_SHOWN)
        zone = _zone(row)
        return format_html_join(
            "",
            '<div class="schedule-slot">{} · {}</div>',
            (
                (
                    slot.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z"),
                    slot.astimezone(UTC).strftime("%H:%M:%S UTC"),
                )
                for slot in slots
            ),
        )

    @admin.display(description=f"last {RUNS_SHOWN} runs")
    def last_runs(self, row: Schedule) -> str:
        runs = selectors.recent_runs(row, RUNS_SHOWN)
        if not runs:
            return "none yet"
        return format_html_join(
            "",
            '<div class="schedule-run">{} {}: {}</div>',
            (
                (
                    "run now" if run.kind == "manual" else "slot",
                    run.slot.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                    _outcome(run),
                )
                for run in runs
            ),
        )

    @admin.display(description="missed runs")
    def missed_policy(self, row: Schedule) -> str:
        policy = f"policy {row.missed}" + (
            f" (cap {row.missed_cap})" if row.missed == "all" else ""
        )
        last = row.last_missed
        if not row.last_missed_at or not last:
            return policy
        return format_html(
            '{}<div class="schedule-missed">{} applied at {}: {} of {} due slots missed, '
            "{} run</div>",
            policy,
            last.get("policy", ""),
            row.last_missed_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            last.get("missed", 0),
            last.get("due", 0),
            len(last.get("fired", [])),
        )

    def _change(self, request, queryset, change, verb: str) -> None:
        done = []
        for name in queryset.values_list("name", flat=True):
            try:
                change(name=name, actor=request.user.get_username())
                done.append(name)
            except services.UnknownSchedule as exc:
                self.message_user(request, str(exc), messages.WARNING)
        self.message_user(request, f"{verb}: {', '.join(done) or 'none'}.", messages.SUCCESS)

    @admin.action(description="Pause selected schedules", permissions=["pause_schedule"])
    def pause_selected(self, request, queryset) -> None:
        self._change(request, queryset, services.schedule_pause, "Paused")

    @admin.action(description="Resume selected schedules", permissions=["pause_schedule"])
    def resume_selected(self, request, queryset) -> None:
        self._change(request, queryset, services.schedule_resume, "Resumed")

    @admin.action(description="Run selected schedules now", permissions=["run_schedule"])
    def run_selected_now(self, request, queryset) -> None:
        self._change(request, queryset, services.schedule_run_now, "Enqueued a run now of")


def _zone(row: Schedule):
    from zoneinfo import ZoneInfo

    return ZoneInfo(row.timezone)


def _outcome(run) -> str:
    job = run.job
    if job is None:
        return "job purged"
    text = f"job {job.pk} {job.status}"
    if job.started_at and job.finished_at:
        text += f" in {seconds_between(job.started_at, job.finished_at):.2f}s"
    return text
