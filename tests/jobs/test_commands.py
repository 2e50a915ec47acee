"""The job engine's management commands: setup_periodic_tasks, queue_stats, run_maintenance."""

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from jobs.models import Job, JobStatus


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_setup_periodic_tasks_installs_every_service_once_with_its_interval(settings):
    settings.CONVEYOR_PERIODIC_TASKS = [
        ("conveyor: reap", "maintenance.reap_jobs", timedelta(seconds=30)),
        ("conveyor: sweep", "maintenance.sweep_jobs", timedelta(minutes=2)),
    ]
    run("setup_periodic_tasks")
    run("setup_periodic_tasks")  # idempotent
    tasks = {t.name: t for t in PeriodicTask.objects.select_related("interval")}
    assert set(tasks) == {"conveyor: reap", "conveyor: sweep"}
    assert (
        tasks["conveyor: reap"].interval.every == 30
        and tasks["conveyor: reap"].queue == "maintenance"
    )
    assert tasks["conveyor: sweep"].interval.every == 120
    settings.CONVEYOR_PERIODIC_TASKS = [
        ("conveyor: reap", "maintenance.reap_jobs", timedelta(seconds=45))
    ]
    out = run("setup_periodic_tasks")
    assert "changed: conveyor: reap every 45s -> maintenance.reap_jobs" in out
    assert "removed: conveyor: sweep -> maintenance.sweep_jobs" in out
    assert PeriodicTask.objects.get(name="conveyor: reap").interval.every == 45
    assert not PeriodicTask.objects.filter(name="conveyor: sweep").exists()


def test_the_default_schedule_covers_every_maintenance_service():
    from django.conf import settings

    tasks = {task for _, task, _ in settings.CONVEYOR_PERIODIC_TASKS}
    assert {"maintenance.reap_jobs", "maintenance.sweep_jobs", "maintenance.purge_jobs"} <= tasks
    from project.celery import app

    app.loader.import_default_modules()
    assert tasks <= set(app.tasks), tasks - set(app.tasks)


@pytest.mark.django_db
def test_queue_stats_prints_counts_and_json():
    now = timezone.now()
    for status in (JobStatus.QUEUED, JobStatus.QUEUED, JobStatus.DEAD):
        Job.objects.create(
            task="tests.record",
            status=status,
            run_after=now - timedelta(seconds=30),
            created_at=now,
            updated_at=now,
        )
    text = run("queue_stats")
    assert "queued=2" in text and "dead=1" in text and "oldest queued job: 3" in text
    stats = json.loads(run("queue_stats", "--json"))
    assert stats["by_status"]["queued"] == 2 and len(stats["recent"]) == 3


@pytest.mark.django_db
@override_settings(CONVEYOR_PURGE_COMPLETED_RETENTION=timedelta(days=7))
def test_run_maintenance_runs_one_pass():
    now = timezone.now()
    Job.objects.create(
        task="tests.record",
        status=JobStatus.SUCCEEDED,
        run_after=now,
        created_at=now,
        updated_at=now,
        finished_at=now - timedelta(days=8),
    )
    assert "completed=1" in run("run_maintenance", "purge")
    assert Job.objects.count() == 0
