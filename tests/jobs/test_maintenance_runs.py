"""jobs.maintenance.runs: one run at a time, at most one per half interval, each recorded."""

import io
import json
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from jobs.maintenance import runs
from jobs.models import Job, JobStatus, MaintenanceLock, MaintenanceRun
from project.access.tokens import token_create
from tests.api.conftest import Api

INTERVALS = [
    ("conveyor: reap", "maintenance.reap_jobs", timedelta(seconds=60)),
    ("conveyor: purge", "maintenance.purge_jobs", timedelta(hours=1)),
]


@dataclass(frozen=True)
class Counts:
    done: int = 3


@pytest.fixture(autouse=True)
def schedule(settings):
    settings.CONVEYOR_PERIODIC_TASKS = INTERVALS


def events(caplog, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == name]


def age_last_run(runner: str, by: timedelta) -> None:
    MaintenanceRun.objects.filter(runner=runner).update(
        started_at=timezone.now() - by, finished_at=timezone.now() - by
    )


@pytest.mark.django_db
def test_a_run_is_recorded_and_logged_with_its_counts(caplog):
    caplog.set_level(logging.INFO, "jobs.maintenance")
    outcome = runs.run("reap_jobs", Counts)
    assert outcome.ran and outcome.counts == {"done": 3} and not outcome.error
    record = MaintenanceRun.objects.get()
    assert record.runner == "reap_jobs" and record.counts == {"done": 3} and record.error == ""
    assert record.finished_at >= record.started_at and record.host
    [line] = events(caplog, "maintenance.run")
    assert line.runner == "reap_jobs" and line.counts == {"done": 3} and line.error is None
    assert line.duration_ms == record.duration_ms


@pytest.mark.django_db
def test_a_schedule_tick_that_fired_nothing_is_recorded_and_logged_at_debug_only(caplog):
    caplog.set_level(logging.DEBUG, "jobs.maintenance")
    runs.run("fire_schedules", lambda: {"schedules": 0, "fired": 0, "missed": 0}, force=True)
    runs.run("fire_schedules", lambda: {"schedules": 1, "fired": 1, "missed": 0}, force=True)
    assert [r.counts["fired"] for r in MaintenanceRun.objects.order_by("pk")] == [0, 1]
    lines = events(caplog, "maintenance.run")
    assert [(line.levelno, line.counts["fired"]) for line in lines] == [
        (logging.DEBUG, 0),
        (logging.INFO, 1),
    ]
    runs.run("reap_jobs", lambda: {"reaped": 0}, force=True)  # not a ticker: always INFO
    assert events(caplog, "maintenance.run")[-1].levelno == logging.INFO


def test_beats_line_for_the_schedule_tick_is_a_debug_line_and_its_others_stay_info(caplog):
    from project.logging import QuietTicks

    def sent(task: str) -> logging.LogRecord:
        message = "Scheduler: Sending due task %s (%s)"
        return logging.makeLogRecord(
            {"name": "celery.beat", "levelno": logging.INFO, "levelname": "INFO",
             "msg": message, "args": ("x", task)}
        )  # fmt: skip

    quiet = QuietTicks()
    caplog.set_level(logging.INFO)  # the root logger, as CONVEYOR_LOG_LEVEL sets it
    tick, other = sent("maintenance.fire_schedules"), sent("maintenance.reap_jobs")
    assert not quiet.filter(tick) and tick.levelname == "DEBUG"
    assert quiet.filter(other) and other.levelname == "INFO"
    caplog.set_level(logging.DEBUG)
    assert quiet.filter(sent("maintenance.fire_schedules"))  # shown when the logs are at DEBUG


@pytest.mark.django_db
def test_a_run_within_half_an_interval_of_the_last_completed_one_is_skipped(caplog):
    caplog.set_level(logging.INFO, "jobs.maintenance")
    calls = []
    runs.run("reap_jobs", lambda: calls.append(1))
    age_last_run("reap_jobs", timedelta(seconds=29))  # interval 60s: half is 30s
    outcome = runs.run("reap_jobs", lambda: calls.append(1))
    assert not outcome.ran and outcome.skipped == runs.SkipReason.RECENT
    [skipped] = events(caplog, "maintenance.skipped")
    assert skipped.runner == "reap_jobs" and skipped.reason == runs.SkipReason.RECENT
    assert calls == [1] and MaintenanceRun.objects.count() == 1

    age_last_run("reap_jobs", timedelta(seconds=31))
    assert runs.run("reap_jobs", lambda: calls.append(1)).ran
    assert calls == [1, 1]
    # An operator's run (run_maintenance) is not held back by the interval.
    assert runs.run("reap_jobs", lambda: calls.append(1), force=True).ran
    assert calls == [1, 1, 1]


@pytest.mark.django_db
def test_the_interval_edited_in_the_beat_schedule_is_the_one_that_counts():
    every_10s, _ = IntervalSchedule.objects.get_or_create(every=10, period="seconds")
    PeriodicTask.objects.create(name="reap", task="maintenance.reap_jobs", interval=every_10s)
    assert runs.interval_of("reap_jobs") == timedelta(seconds=10)
    runs.run("reap_jobs", Counts)
    age_last_run("reap_jobs", timedelta(seconds=6))
    assert runs.run("reap_jobs", Counts).ran  # 6s > half of 10s, though < half of the 60s setting


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_run_exits_at_once_while_postgresql_holds_the_advisory_lock(caplog):
    caplog.set_level(logging.INFO, "jobs.maintenance")
    assert connection.vendor == "postgresql"
    params = connection.get_connection_params()
    key = runs._Lock("reap_jobs", ttl=timedelta(minutes=5)).key
    with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"}) as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [runs.ADVISORY_NAMESPACE, key])
        outcome = runs.run("reap_jobs", Counts)
        assert not outcome.ran and outcome.skipped == runs.SkipReason.LOCKED
        assert runs.run("purge_jobs", Counts).ran  # another runner's lock is its own
        other.execute("SELECT pg_advisory_unlock(%s, %s)", [runs.ADVISORY_NAMESPACE, key])
    assert runs.run("reap_jobs", Counts).ran
    assert [r.reason for r in events(caplog, "maintenance.skipped")] == [runs.SkipReason.LOCKED]


@pytest.mark.django_db(transaction=True)
def test_two_runs_started_together_run_the_service_once():
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow():
        calls.append(1)
        started.set()
        release.wait(10)
        return Counts()

    outcomes = []

    def first():
        try:
            outcomes.append(runs.run("reap_jobs", slow))
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert started.wait(10)
    second = runs.run("reap_jobs", slow)
    release.set()
    thread.join(10)
    assert not second.ran and second.skipped == runs.SkipReason.LOCKED
    assert outcomes[0].ran and calls == [1]


@pytest.mark.django_db
def test_the_lock_row_used_without_advisory_locks_excludes_a_twin_until_released_or_expired(
    monkeypatch,
):
    first = runs._Lock("prune_worktrees", ttl=timedelta(minutes=5))
    twin = runs._Lock("prune_worktrees", ttl=timedelta(minutes=5))
    first.advisory = twin.advisory = False  # the SQLite path, exercised on this database
    assert first.acquire()
    assert not twin.acquire()
    first.release()
    assert twin.acquire()
    # A holder killed mid-run frees the runner once its ttl has passed.
    MaintenanceLock.objects.filter(runner="prune_worktrees").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert first.acquire()


@pytest.mark.django_db
def test_a_raising_runner_is_recorded_with_its_error_and_the_next_run_is_normal(caplog):
    caplog.set_level(logging.INFO, "jobs.maintenance")

    def broken():
        raise RuntimeError("disk on fire")

    outcome = runs.run("purge_jobs", broken)
    assert outcome.ran and outcome.error == "RuntimeError: disk on fire"
    assert MaintenanceRun.objects.get().error == "RuntimeError: disk on fire"
    [failed] = events(caplog, "maintenance.failed")
    assert failed.exc_info and failed.runner == "purge_jobs"
    assert events(caplog, "maintenance.run")[0].error == "RuntimeError: disk on fire"
    assert runs.run("reap_jobs", Counts).ran  # another runner is untouched
    age_last_run("purge_jobs", timedelta(hours=1))
    assert runs.run("purge_jobs", Counts).counts == {"done": 3}


@pytest.mark.django_db
def test_records_past_the_retention_go_but_each_runners_latest_stays(settings):
    settings.CONVEYOR_MAINTENANCE_RETENTION = timedelta(days=1)
    old = timezone.now() - timedelta(days=2)
    for runner in ("reap_jobs", "reap_jobs", "fetch_workspaces"):
        MaintenanceRun.objects.create(runner=runner, started_at=old, finished_at=old, duration_ms=1)
    kept = MaintenanceRun.objects.create(
        runner="reap_jobs",
        started_at=timezone.now() - timedelta(hours=23),
        finished_at=timezone.now() - timedelta(hours=23),
        duration_ms=1,
    )
    runs.run("reap_jobs", Counts)
    assert set(MaintenanceRun.objects.filter(runner="reap_jobs").values_list("pk", flat=True)) > {
        kept.pk
    }
    assert MaintenanceRun.objects.filter(runner="reap_jobs").count() == 2
    assert MaintenanceRun.objects.filter(runner="fetch_workspaces").count() == 1  # its latest


@pytest.mark.django_db
def test_a_frequent_runner_keeps_at_most_its_cap_of_records_within_the_retention(monkeypatch):
    monkeypatch.setattr(runs, "MAX_RECORDS_PER_RUNNER", 3)
    now = timezone.now()
    for minutes in (50, 40, 30, 20):  # all within the 7-day retention
        when = now - timedelta(minutes=minutes)
        MaintenanceRun.objects.create(
            runner="account_jobs", started_at=when, finished_at=when, duration_ms=1
        )
    other = now - timedelta(minutes=50)
    MaintenanceRun.objects.create(
        runner="reap_jobs", started_at=other, finished_at=other, duration_ms=1
    )
    runs.run("account_jobs", Counts, force=True)
    ages = sorted(
        round((now - at).total_seconds() / 60)
        for at in MaintenanceRun.objects.filter(runner="account_jobs").values_list(
            "finished_at", flat=True
        )
    )
    assert ages == [0, 20, 30]  # the new run and the two newest before it
    assert MaintenanceRun.objects.filter(runner="reap_jobs").count() == 1  # not its runner


@pytest.mark.django_db
def test_every_maintenance_task_goes_through_runs(settings):
    from django.conf import settings as live

    from project.celery import app

    settings.CONVEYOR_PERIODIC_TASKS = live.CONVEYOR_PERIODIC_TASKS
    for _, name, _ in live.CONVEYOR_PERIODIC_TASKS:
        outcome = app.tasks[name].run()
        assert outcome["ran"] and outcome["runner"] == name.removeprefix("maintenance."), outcome
        assert not app.tasks[name].run()["ran"]  # the twin tick right after is skipped
    assert MaintenanceRun.objects.count() == len(live.CONVEYOR_PERIODIC_TASKS)
    assert not MaintenanceRun.objects.exclude(error="").exists()


def run_command(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_queue_stats_and_the_api_report_each_runners_last_run_and_flag_an_overdue_one():
    runs.run("reap_jobs", Counts)
    runs.run("purge_jobs", Counts)
    age_last_run("purge_jobs", timedelta(hours=3, minutes=1))  # 3 intervals of 1h, and more
    stats = {r["runner"]: r for r in run_command_json()}
    assert stats["reap_jobs"]["counts"] == {"done": 3} and not stats["reap_jobs"]["overdue"]
    assert stats["purge_jobs"]["overdue"]
    text = run_command("queue_stats")
    assert "maintenance reap_jobs" in text and "done=3" in text
    assert "purge_jobs" in text and "OVERDUE" in text and "beat not running?" in text

    response = Api(token_create(name="reader", scope="read")[1]).get("/queue")
    assert response.status_code == 200, response.content
    api = {r["runner"]: r for r in response.json()["maintenance"]}
    assert api["reap_jobs"]["last_run_at"] and api["reap_jobs"]["interval_seconds"] == 60
    assert api["purge_jobs"]["overdue"] is True and api["reap_jobs"]["overdue"] is False


@pytest.mark.django_db
def test_a_disabled_runner_is_not_flagged_and_a_never_run_one_is_once_long_installed():
    call_command("setup_periodic_tasks", stdout=io.StringIO())
    PeriodicTask.objects.filter(task="maintenance.reap_jobs").update(
        date_changed=timezone.now() - timedelta(minutes=4)
    )
    stats = {r["runner"]: r for r in run_command_json()}
    assert stats["reap_jobs"]["overdue"] and stats["reap_jobs"]["last_run_at"] is None
    assert not stats["purge_jobs"]["overdue"]  # installed just now, interval 1h
    PeriodicTask.objects.filter(task="maintenance.reap_jobs").update(enabled=False)
    stats = {r["runner"]: r for r in run_command_json()}
    assert not stats["reap_jobs"]["overdue"] and stats["reap_jobs"]["enabled"] is False


def run_command_json() -> list[dict]:
    return json.loads(run_command("queue_stats", "--json"))["maintenance"]


@pytest.mark.django_db
def test_the_admin_lists_last_runs_per_runner_and_flags_an_overdue_one(admin_user):
    runs.run("reap_jobs", Counts)
    age_last_run("reap_jobs", timedelta(minutes=4))
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/jobs/maintenancerun/").content.decode()
    assert 'id="maintenance-runners"' in page
    assert "reap_jobs" in page and "done=3" in page
    assert "overdue: beat not running?" in page
    assert "no completed run within 3 intervals" in page


@pytest.mark.django_db
def test_setup_periodic_tasks_keeps_a_schedule_disabled_and_resets_an_edited_interval():
    assert "added: conveyor: reap every 60s" in run_command("setup_periodic_tasks")
    every_5s, _ = IntervalSchedule.objects.get_or_create(every=5, period="seconds")
    PeriodicTask.objects.filter(name="conveyor: reap").update(enabled=False, interval=every_5s)
    out = run_command("setup_periodic_tasks")
    assert "kept disabled: it was disabled in the admin" in out
    assert "interval reset from 5s to the setting" in out
    reap = PeriodicTask.objects.get(name="conveyor: reap")
    assert not reap.enabled and reap.interval.every == 60
    assert PeriodicTask.objects.get(name="conveyor: purge").enabled


@pytest.mark.django_db
def test_run_maintenance_runs_any_runner_now_and_reports_a_failure():
    now = timezone.now()
    Job.objects.create(
        task="tests.record",
        status=JobStatus.SUCCEEDED,
        run_after=now,
        created_at=now,
        updated_at=now,
        finished_at=now - timedelta(days=30),
    )
    assert "completed=1" in run_command("run_maintenance", "purge")
    # A second manual run right away still runs: an operator asked for it.
    assert "completed=0" in run_command("run_maintenance", "purge_jobs")
    assert "skipped" in run_command("run_maintenance", "purge_jobs", "--respect-interval")
    assert MaintenanceRun.objects.filter(runner="purge_jobs").count() == 2
