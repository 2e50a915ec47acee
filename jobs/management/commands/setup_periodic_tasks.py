from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask


class Command(BaseCommand):
    help = "Install or update Conveyor's maintenance schedule in django-celery-beat (idempotent)."

    @transaction.atomic
    def handle(self, *args, **options):
        for name, task, interval in settings.CONVEYOR_PERIODIC_TASKS:
            seconds = max(1, int(interval.total_seconds()))
            schedule, _ = IntervalSchedule.objects.get_or_create(
                every=seconds, period=IntervalSchedule.SECONDS
            )
            _, created = PeriodicTask.objects.update_or_create(
                name=name,
                defaults={
                    "task": task,
                    "interval": schedule,
                    "crontab": None,
                    "queue": "maintenance",
                    # A tick that waited longer than one interval is stale: the next one comes.
                    "expire_seconds": seconds,
                    "enabled": True,
                },
            )
            self.stdout.write(
                f"{'created' if created else 'updated'}: {name} every {seconds}s -> {task}"
            )
