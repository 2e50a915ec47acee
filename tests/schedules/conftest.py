"""Schedules under real beat and worker processes: helpers shared by these tests."""

from datetime import datetime, timedelta

from jobs.maintenance.schedule import schedule_install
from jobs.models import Job
from jobs.schedules.services import schedules_install
from jobs.schedules.spec import ScheduleSpec, resolve
from tests.browser.conftest import admin_page, page  # noqa: F401 - the browser fixtures

TICK = "maintenance.fire_schedules"


def install(*specs: ScheduleSpec, now: datetime | None = None) -> None:
    """Reconcile exactly ``specs`` into the database."""
    schedules_install([resolve(spec) for spec in specs], now=now)


def tick_every_second(settings) -> None:
    """Install the schedules' beat entry as setup_periodic_tasks does, every second."""
    (entry,) = [e for e in settings.CONVEYOR_PERIODIC_TASKS if e[1] == TICK]
    settings.CONVEYOR_PERIODIC_TASKS = [(entry[0], TICK, timedelta(seconds=1))]
    schedule_install()


def slots_of(name: str) -> list[datetime]:
    """The slots of ``name``'s jobs (from their payloads), in order, repeats kept."""
    texts = Job.objects.filter(payload__schedule=name).values_list("payload__slot", flat=True)
    return sorted(datetime.fromisoformat(text) for text in texts if text is not None)
