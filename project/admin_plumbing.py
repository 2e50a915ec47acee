"""Conveyor's own admins for the third-party models on the console (auth, beat, results, axes).

The stock admins of django-celery-beat and django-axes declare actions with no permission
(a view-only user could disable every periodic task, the reaper and sweeper among them), and
every stock admin accepts a filter on any field (``?password__startswith=pbkdf2``). Each is
registered again here through ``ConveyorAdminMixin``, its changing actions needing the
model's change (or delete) permission. ``register_plumbing_admins`` runs once the admin has
discovered every app's admin module (project.apps).
"""

from axes import admin as axes_admin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django_celery_beat import admin as beat_admin
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)
from django_celery_results import admin as results_admin
from django_celery_results.models import GroupResult, TaskResult

from project.admin_base import ConveyorAdminMixin
from project.secret_fields import mark_secret


def _guarded(action, *permissions: str):
    """Return the third-party ``action`` function, now requiring ``permissions``."""

    def run(modeladmin, request, queryset):
        return action(modeladmin, request, queryset)

    run.__name__ = action.__name__
    run.short_description = getattr(action, "short_description", action.__name__)
    run.allowed_permissions = permissions
    return run


class UserAdmin(ConveyorAdminMixin, auth_admin.UserAdmin):
    """Users, with lookups limited to the declared filters (never the password hash)."""


class GroupAdmin(ConveyorAdminMixin, auth_admin.GroupAdmin):
    """Groups, with lookups limited to the declared filters."""


class PeriodicTaskAdmin(ConveyorAdminMixin, beat_admin.PeriodicTaskAdmin):
    """Beat schedules: enabling, disabling, toggling and running one need change permission."""

    enable_tasks = _guarded(beat_admin.PeriodicTaskAdmin.enable_tasks, "change")
    disable_tasks = _guarded(beat_admin.PeriodicTaskAdmin.disable_tasks, "change")
    toggle_tasks = _guarded(beat_admin.PeriodicTaskAdmin.toggle_tasks, "change")
    run_tasks = _guarded(beat_admin.PeriodicTaskAdmin.run_tasks, "change")


class ClockedScheduleAdmin(ConveyorAdminMixin, beat_admin.ClockedScheduleAdmin):
    """Clocked schedules, with lookups limited to the declared filters."""


class CrontabScheduleAdmin(ConveyorAdminMixin, beat_admin.CrontabScheduleAdmin):
    """Crontab schedules, with lookups limited to the declared filters."""


class SolarScheduleAdmin(ConveyorAdminMixin, beat_admin.SolarScheduleAdmin):
    """Solar schedules, with lookups limited to the declared filters."""


class IntervalScheduleAdmin(ConveyorAdminMixin, beat_admin.IntervalScheduleAdmin):
    """Interval schedules, with lookups limited to the declared filters."""


class TaskResultAdmin(ConveyorAdminMixin, results_admin.TaskResultAdmin):
    """Celery task results, with lookups limited to the declared filters."""


class GroupResultAdmin(ConveyorAdminMixin, results_admin.GroupResultAdmin):
    """Celery group results, with lookups limited to the declared filters."""


class AccessAttemptAdmin(ConveyorAdminMixin, axes_admin.AccessAttemptAdmin):
    """Failed-login records: cleaning up expired ones deletes rows, so it needs delete."""

    @admin.action(description="Clean up expired attempts", permissions=["delete"])
    def cleanup_expired_attempts(self, request, queryset):
        """Delete the attempts older than the lock-out period."""
        # axes reads the attempt's time from the request, which only its login path sets
        # (without it the stock action fails); None means "now".
        request.axes_attempt_time = None
        count = self.handler.clean_expired_user_attempts(request=request)
        self.message_user(request, f"Cleaned up {count} expired access attempts.")


class AccessLogAdmin(ConveyorAdminMixin, axes_admin.AccessLogAdmin):
    """Login records, with lookups limited to the declared filters."""


class AccessFailureLogAdmin(ConveyorAdminMixin, axes_admin.AccessFailureLogAdmin):
    """Failed-login log, with lookups limited to the declared filters."""


PLUMBING_ADMINS = {
    get_user_model(): UserAdmin,
    Group: GroupAdmin,
    PeriodicTask: PeriodicTaskAdmin,
    ClockedSchedule: ClockedScheduleAdmin,
    CrontabSchedule: CrontabScheduleAdmin,
    SolarSchedule: SolarScheduleAdmin,
    IntervalSchedule: IntervalScheduleAdmin,
    TaskResult: TaskResultAdmin,
    GroupResult: GroupResultAdmin,
    AccessAttempt: AccessAttemptAdmin,
    AccessLog: AccessLogAdmin,
    AccessFailureLog: AccessFailureLogAdmin,
}


def register_plumbing_admins(site: admin.AdminSite) -> None:
    """Replace the stock admins of the third-party models ``site`` shows with Conveyor's."""
    mark_secret(get_user_model(), "password")
    for model, model_admin in PLUMBING_ADMINS.items():
        if site.is_registered(model):
            site.unregister(model)
            site.register(model, model_admin)
