"""The admin's queues and tasks pages: paused or not, limits, pause and resume actions.

A queue's actions need ``jobs.pause_queue`` and go through jobs.queues; a task's need
``jobs.pause_task`` and go through jobs.task_states (both audited, exact).
"""

from django.contrib import admin, messages
from django.utils import timezone

from jobs import conf, limits, queues, task_states
from jobs.models import QueueState, TaskState
from project.admin_base import ReadOnlyModelAdmin
from project.admin_permissions import permission_check


class PausableAdmin(ReadOnlyModelAdmin):
    """A read-only list of state rows whose actions pause and resume them."""

    @admin.display(boolean=True, description="paused")
    def paused(self, state) -> bool:
        return state.paused_at is not None

    def _change(self, request, queryset, change, verb: str) -> None:
        done = []
        for name in queryset.values_list("name", flat=True):
            try:
                change(name, actor=request.user.get_username())
                done.append(name)
            except (queues.UnknownQueue, task_states.UnknownTask) as exc:  # a row left behind
                self.message_user(request, str(exc), messages.WARNING)
        self.message_user(request, f"{verb}: {', '.join(done) or 'none'}.", messages.SUCCESS)


@admin.register(QueueState)
class QueueStateAdmin(PausableAdmin):
    list_display = ("name", "paused", "paused_at", "paused_by", "concurrency_limit")
    readonly_fields = ("name", "paused_at", "paused_by", "updated_at")
    actions = ["pause_selected", "resume_selected"]

    has_pause_queue_permission = permission_check("pause_queue")

    @admin.display(description="concurrency limit")
    def concurrency_limit(self, state: QueueState) -> str:
        limit = conf.get().queue_concurrency.get(state.name)
        return "—" if limit is None else str(limit)

    @admin.action(description="Pause selected queues", permissions=["pause_queue"])
    def pause_selected(self, request, queryset) -> None:
        self._change(request, queryset, queues.pause, "Paused")

    @admin.action(description="Resume selected queues", permissions=["pause_queue"])
    def resume_selected(self, request, queryset) -> None:
        self._change(request, queryset, queues.resume, "Resumed")


@admin.register(TaskState)
class TaskStateAdmin(PausableAdmin):
    """Job tasks that were paused or limited: pause and resume one task in every queue."""

    list_display = ("name", "paused", "paused_at", "paused_by", "declared_limit", "window_full")
    readonly_fields = ("name", "paused_at", "paused_by", "full_until", "updated_at")
    exclude = ("starts",)
    actions = ["pause_selected", "resume_selected"]

    has_pause_task_permission = permission_check("pause_task")

    @admin.display(description="rate window full until")
    def window_full(self, state: TaskState) -> str:
        if state.full_until is None or state.full_until <= timezone.now():
            return "—"
        return f"{state.full_until:%Y-%m-%d %H:%M:%S} UTC"

    @admin.display(description="limit")
    def declared_limit(self, state: TaskState) -> str:
        return limits.summary(limits.limit_of(task_states.registered().get(state.name)))

    @admin.action(description="Pause selected tasks", permissions=["pause_task"])
    def pause_selected(self, request, queryset) -> None:
        self._change(request, queryset, task_states.pause, "Paused")

    @admin.action(description="Resume selected tasks", permissions=["pause_task"])
    def resume_selected(self, request, queryset) -> None:
        self._change(request, queryset, task_states.resume, "Resumed")
