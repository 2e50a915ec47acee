"""Install Conveyor's maintenance schedule into django-celery-beat, keeping operators' choices.

A thin command over ``jobs.maintenance.schedule.schedule_install`` (its docstring has the
rules): one line per entry (``added``, ``changed`` with what, ``unchanged``, ``removed``), then
one line of counts. ``--verbosity 0`` prints nothing.
"""

from collections import Counter

from django.core.management.base import BaseCommand

from jobs.maintenance.schedule import Action, schedule_install


class Command(BaseCommand):
    help = (
        "Install or update Conveyor's maintenance schedule in django-celery-beat (idempotent). "
        "Intervals follow the settings; a schedule disabled in the admin stays disabled."
    )

    def handle(self, *args, **options):
        results = schedule_install()
        if options["verbosity"] < 1:
            return
        for result in results:
            self.stdout.write(result.describe())
        counts = Counter(result.action for result in results)
        self.stdout.write("setup_periodic_tasks: " + ", ".join(f"{counts[a]} {a}" for a in Action))
