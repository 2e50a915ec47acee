"""The admin's queues page: every declared queue, paused or not, with pause and resume actions.

Both actions need ``jobs.pause_queue`` and go through jobs.queues (audited, exact).
"""

from django.contrib import admin, messages

from jobs import conf, queues
from jobs.models import QueueState
from project.admin_base import ConveyorModelAdmin
from project.admin_permissions import permission_check


@admin.register(QueueState)
class QueueStateAdmin(ConveyorModelAdmin):
    list_display = ("name", "paused", "paused_at", "paused_by", "concurrency_limit")
    readonly_fields = ("name", "paused_at", "paused_by", "updated_at")
    actions = ["pause_selected", "resume_selected"]

    has_pause_queue_permission = permission_check("pause_queue")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(boolean=True, description="paused")
    def paused(self, state: QueueState) -> bool:
        return state.paused_at is not None

    @admin.display(description="concurrency limit")
    def concurrency_limit(self, state: QueueState) -> str:
        limit = conf.get().queue_concurrency.get(state.name)
        return "—" if limit is None else str(limit)

    def _change(self, request, queryset, change, verb: str) -> None:
        done = []
        for name in queryset.values_list("name", flat=True):
            try:
                change(name, actor=request.user.get_username())
                done.append(name)
            except queues.UnknownQueue as exc:  # a row left from a queue no longer declared
                self.message_user(request, str(exc), messages.WARNING)
        self.message_user(request, f"{verb}: {', '.join(done) or 'none'}.", messages.SUCCESS)

    @admin.action(description="Pause selected queues", permissions=["pause_queue"])
    def pause_selected(self, request, queryset) -> None:
        self._change(request, queryset, queues.pause, "Paused")

    @admin.action(description="Resume selected queues", permissions=["pause_queue"])
    def resume_selected(self, request, queryset) -> None:
        self._change(request, queryset, queues.resume, "Resumed")
