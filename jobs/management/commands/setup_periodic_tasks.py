"""Install Conveyor's maintenance schedule into django-celery-beat, and the declared schedules.

A thin command over ``jobs.maintenance.schedule.schedule_install`` and
``jobs.schedules.services.schedules_install`` (their docstrings have the rules): one line per
beat entry and per schedule (``added``, ``changed`` with what, ``unchanged``, ``removed``),
then one line of counts for each (no schedule lines while none is declared or removed).
``--verbosity 0`` prints nothing.
"""

from collections import Counter

from django.core.management.base import BaseCommand

from jobs.maintenance.schedule import Action, schedule_install
from jobs.schedules.services import schedules_install


class Command(BaseCommand):
    help = (
        "Install or update Conveyor's maintenance schedule in django-celery-beat (idempotent). "
        "Intervals follow the settings; a schedule disabled in the admin stays disabled."
    )

    def handle(self, *args, **options):
        results = schedule_install()
        schedules = schedules_install()
        if options["verbosity"] < 1:
            return
        for result in results:
            self.stdout.write(result.describe())
        counts = Counter(result.action for result in results)
        self.stdout.write("setup_periodic_tasks: " + ", ".join(f"{counts[a]} {a}" for a in Action))
        if not schedules:  # none declared, none removed: nothing to say
            return
        for result in schedules:
            self.stdout.write(result.describe())
        counts = Counter(result.action for result in schedules)
        self.stdout.write(
            "schedules: " + ", ".join(f"{counts[a]} {a}" for a in Action) + " (from code)"
        )
