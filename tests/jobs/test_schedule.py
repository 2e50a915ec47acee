"""setup_periodic_tasks: what it does to each beat entry, and that it says so truthfully."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

pytestmark = pytest.mark.django_db

SCHEDULE = [
    ("conveyor: reap", "maintenance.reap_jobs", timedelta(seconds=30)),
    ("conveyor: sweep", "maintenance.sweep_jobs", timedelta(minutes=2)),
    ("conveyor: purge", "maintenance.purge_jobs", timedelta(hours=1)),
]


def setup(verbosity: int = 1) -> list[str]:
    out = io.StringIO()
    call_command("setup_periodic_tasks", stdout=out, verbosity=verbosity)
    return out.getvalue().splitlines()


@pytest.fixture
def schedule(settings):
    settings.CONVEYOR_PERIODIC_TASKS = list(SCHEDULE)
    return settings


def test_first_run_adds_every_entry_and_a_second_changes_nothing(schedule):
    assert setup() == [
        "added: conveyor: reap every 30s -> maintenance.reap_jobs",
        "added: conveyor: sweep every 120s -> maintenance.sweep_jobs",
        "added: conveyor: purge every 3600s -> maintenance.purge_jobs",
        "setup_periodic_tasks: 3 added, 0 changed, 0 unchanged, 0 removed",
    ]
    saved = dict(PeriodicTask.objects.values_list("name", "date_changed"))
    assert setup() == [
        "unchanged: conveyor: reap every 30s -> maintenance.reap_jobs",
        "unchanged: conveyor: sweep every 120s -> maintenance.sweep_jobs",
        "unchanged: conveyor: purge every 3600s -> maintenance.purge_jobs",
        "setup_periodic_tasks: 0 added, 0 changed, 3 unchanged, 0 removed",
    ]
    # Unchanged means not saved: a save would make every beat reload its schedule.
    assert dict(PeriodicTask.objects.values_list("name", "date_changed")) == saved


def test_each_kind_of_drift_is_put_back_and_named(schedule):
    setup()
    every_5s, _ = IntervalSchedule.objects.get_or_create(every=5, period="seconds")
    PeriodicTask.objects.filter(name="conveyor: reap").update(interval=every_5s)
    PeriodicTask.objects.filter(name="conveyor: sweep").update(queue="celery", expire_seconds=None)
    # The same interval spelled another way is not a change.
    two_minutes, _ = IntervalSchedule.objects.get_or_create(every=2, period="minutes")
    PeriodicTask.objects.filter(name="conveyor: sweep").update(interval=two_minutes)
    nightly = CrontabSchedule.objects.create(minute="0", hour="3")
    PeriodicTask.objects.filter(name="conveyor: purge").update(
        interval=None, crontab=nightly, enabled=False
    )
    assert setup() == [
        "changed: conveyor: reap every 30s -> maintenance.reap_jobs"
        " (interval reset from 5s to the setting)",
        "changed: conveyor: sweep every 120s -> maintenance.sweep_jobs"
        " (queue was celery; expiry was unset)",
        "changed: conveyor: purge every 3600s -> maintenance.purge_jobs"
        " (schedule reset from a non-interval schedule to the setting)"
        " [kept disabled: it was disabled in the admin]",
        "setup_periodic_tasks: 0 added, 3 changed, 0 unchanged, 0 removed",
    ]
    entries = {e.name: e for e in PeriodicTask.objects.select_related("interval")}
    assert entries["conveyor: reap"].interval.every == 30
    assert (entries["conveyor: sweep"].queue, entries["conveyor: sweep"].expire_seconds) == (
        "maintenance",
        120,
    )
    purge = entries["conveyor: purge"]
    assert purge.crontab_id is None and purge.interval.every == 3600 and not purge.enabled
    # Disabled and otherwise as wanted: unchanged, and still said to be disabled.
    assert setup()[2] == (
        "unchanged: conveyor: purge every 3600s -> maintenance.purge_jobs"
        " [kept disabled: it was disabled in the admin]"
    )


def test_an_entry_the_settings_dropped_is_removed_and_an_operators_own_is_kept(schedule):
    setup()
    every_hour, _ = IntervalSchedule.objects.get_or_create(every=3600, period="seconds")
    PeriodicTask.objects.create(
        name="nightly purge (ops)", task="maintenance.purge_jobs", interval=every_hour
    )
    schedule.CONVEYOR_PERIODIC_TASKS = SCHEDULE[:2]
    lines = setup()
    assert "removed: conveyor: purge -> maintenance.purge_jobs (no longer in the settings)" in lines
    assert lines[-1] == "setup_periodic_tasks: 0 added, 0 changed, 2 unchanged, 1 removed"
    names = set(PeriodicTask.objects.values_list("name", flat=True))
    assert names == {"conveyor: reap", "conveyor: sweep", "nightly purge (ops)"}


def test_verbosity_zero_prints_nothing_but_still_installs(schedule):
    assert setup(verbosity=0) == []
    assert PeriodicTask.objects.filter(name__startswith="conveyor: ").count() == 3
