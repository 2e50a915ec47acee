"""Install Conveyor's maintenance schedule into django-celery-beat, keeping operators' choices.

The rules, also in docs/operations.md:

* a schedule that does not exist is created, enabled, with the interval of its
  ``CONVEYOR_*_INTERVAL`` setting;
* **enabled/disabled belongs to the operator**: a schedule disabled in the admin stays disabled
  (the output says so); re-enable it in the admin;
* **the interval belongs to the settings**: an interval edited in the admin is put back to the
  setting's value (the output says from what to what). To change an interval for good, change
  the setting; an admin edit lasts until the next ``setup_periodic_tasks`` (every ``make run``
  and every deploy runs it).
"""

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from jobs.maintenance.runs import scheduled_intervals


class Command(BaseCommand):
    help = (
        "Install or update Conveyor's maintenance schedule in django-celery-beat (idempotent). "
        "Intervals follow the settings; a schedule disabled in the admin stays disabled."
    )

    @transaction.atomic
    def handle(self, *args, **options):
        before = scheduled_intervals()
        for name, task, interval in settings.CONVEYOR_PERIODIC_TASKS:
            seconds = max(1, int(interval.total_seconds()))
            schedule, _ = IntervalSchedule.objects.get_or_create(
                every=seconds, period=IntervalSchedule.SECONDS
            )
            periodic, created = PeriodicTask.objects.update_or_create(
                name=name,
                defaults={
                    "task": task,
                    "interval": schedule,
                    "crontab": None,
                    "queue": "maintenance",
                    # A tick that waited longer than one interval is stale: the next one comes.
                    "expire_seconds": seconds,
                },
                create_defaults={
                    "task": task,
                    "interval": schedule,
                    "queue": "maintenance",
                    "expire_seconds": seconds,
                    "enabled": True,
                },
            )
            line = f"{'created' if created else 'updated'}: {name} every {seconds}s -> {task}"
            previous = before.get(task.removeprefix("maintenance."))
            if previous and int(previous[0].total_seconds()) != seconds:
                line += f" (interval reset from {int(previous[0].total_seconds())}s to the setting)"
            if not periodic.enabled:
                line += " [kept disabled: it was disabled in the admin]"
            self.stdout.write(line)
