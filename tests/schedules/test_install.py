"""Declared schedules: checked at start-up (one line, exit 2), reconciled, and operated."""

import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils import timezone

from jobs.models import AuditLog, Job, Schedule, ScheduleRun
from jobs.schedules import ScheduleSpec
from jobs.schedules.fire import fire_due
from jobs.schedules.services import (
    UnknownSchedule,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
    schedules_install,
)
from jobs.schedules.spec import resolve
from tests.processes import PYTHON, ROOT
from tests.schedules.conftest import install


def start_with(schedules, env_base) -> subprocess.Popen:
    env = {**env_base, "CONVEYOR_SCHEDULES": json.dumps(schedules)}
    return subprocess.Popen(
        [PYTHON, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


BAD = {
    "an invalid cron expression": (
        [{"name": "nightly", "task": "jobs.noop", "cron": "0 25 * * *"}],
        "schedule 'nightly': invalid cron '0 25 * * *'",
    ),
    "an unknown time zone": (
        [{"name": "paris", "task": "jobs.noop", "cron": "0 3 * * *", "timezone": "Europe/Pari"}],
        "schedule 'paris': unknown time zone 'Europe/Pari'",
    ),
    "an unknown task": (
        [{"name": "typo", "task": "tests.recrod", "every": "5s"}],
        "schedule 'typo': unknown task 'tests.recrod'",
    ),
    "two schedules with one name": (
        [
            {"name": "twice", "task": "jobs.noop", "every": "5s"},
            {"name": "twice", "task": "jobs.noop", "every": "1m"},
        ],
        "schedule 'twice' is declared twice",
    ),
}


def test_a_bad_schedule_stops_start_up_in_one_line_naming_it(worker_env):
    base = worker_env
    started = {case: start_with(schedules, base) for case, (schedules, _) in BAD.items()}
    for case, process in started.items():
        out, err = process.communicate(timeout=60)
        lines = err.strip().splitlines()
        assert process.returncode == 2, (case, err[-2000:])
        assert len(lines) == 1, (case, err)
        assert lines[0].startswith("conveyor: cannot start: CONVEYOR_SCHEDULES: "), lines[0]
        assert BAD[case][1] in lines[0], (case, lines[0])
    good = start_with([{"name": "ok", "task": "jobs.noop", "every": "5s"}], base)
    out, err = good.communicate(timeout=60)
    assert good.returncode == 0, err[-2000:]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"every": "soon"}, "schedule 'x': every 'soon' is not a duration"),
        ({"every": "1.5s"}, "schedule 'x': every is a whole number of seconds"),
        ({"every": "5s", "cron": "* * * * *"}, "schedule 'x': give exactly one of cron and every"),
        ({"every": "5s", "missed": "some"}, "schedule 'x': missed is one of skip, last, all"),
        ({"every": "5s", "payload": {"slot": 1}}, "schedule 'x': payload cannot hold \"slot\""),
        ({"every": "5s", "priority": 101}, "schedule 'x': priority is an integer from -100"),
        ({"every": "5s", "queue": "q" * 101}, "schedule 'x': a queue name is at most 100"),
        ({"every": "5s", "payload": {"x": "\x00"}}, "schedule 'x': a job's payload cannot hold"),
        ({"every": "5s", "queue": "billing"}, "schedule 'x': queue 'billing' is not declared"),
        (
            {"every": "5s", "task": "maintenance.reap_jobs"},
            "schedule 'x': task 'maintenance.reap_jobs' is a plain Celery task",
        ),
    ],
)
def test_other_bad_declarations_are_refused_naming_the_schedule(options, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        resolve(ScheduleSpec(name="x", **{"task": "jobs.noop", **options}))
    assert str(refused.value).startswith(message)


def test_setup_periodic_tasks_says_what_it_added_changed_and_removed(db, settings, capsys):
    settings.CONVEYOR_SCHEDULES = json.dumps(
        [
            {"name": "a", "task": "tests.record", "every": "5s"},
            {"name": "b", "task": "tests.record", "cron": "0 3 * * *", "timezone": "Asia/Tokyo"},
        ]
    )
    call_command("setup_periodic_tasks")
    out = capsys.readouterr().out
    assert "schedule added: a" in out and "schedule added: b" in out
    assert "schedules: 2 added, 0 changed, 0 unchanged, 0 removed" in out
    b = Schedule.objects.get(name="b")
    assert b.next_slot.astimezone(UTC).hour == 18  # 03:00 in Tokyo
    schedule_pause(name="a", actor="ops")

    settings.CONVEYOR_SCHEDULES = json.dumps(
        [
            {"name": "a", "task": "tests.record", "every": "10s", "payload": {"x": 1}},
            {"name": "c", "task": "tests.record", "every": "1m", "missed": "skip"},
        ]
    )
    call_command("setup_periodic_tasks")
    out = capsys.readouterr().out
    assert (
        "schedule changed: a (every_seconds was 5; payload was {}) [paused by an operator]" in out
    )
    assert "schedule added: c" in out
    assert "schedule removed: b (no longer declared)" in out
    assert "schedules: 1 added, 1 changed, 0 unchanged, 1 removed" in out
    a = Schedule.objects.get(name="a")
    assert a.paused_by == "ops" and a.every_seconds == 10  # the pause is the operator's
    call_command("setup_periodic_tasks")
    assert "schedules: 0 added, 0 changed, 2 unchanged, 0 removed" in capsys.readouterr().out


@pytest.fixture
def declared_in_code():
    """A JobTask with a ``schedules`` option and a django.tasks task given to declare()."""
    from celery import shared_task

    from jobs.schedules import declare, spec
    from jobs.task import JobTask
    from project.celery import app
    from tests import djangotasks

    @shared_task(
        base=JobTask,
        name="tests.scheduled",
        schedules=[
            ScheduleSpec(name="nightly in Paris", cron="0 3 * * *", timezone="Europe/Paris")
        ],
    )
    def scheduled(ctx):
        return None

    declare(djangotasks.add, name="add every minute", cron="* * * * *", payload={"x": 1, "y": 2})
    yield
    del app.tasks["tests.scheduled"]
    spec._declared.clear()


def test_schedules_declared_on_a_task_and_with_declare_are_read(db, declared_in_code):
    from jobs.schedules.spec import declared

    names = {spec.name: spec for spec in declared()}
    assert names["nightly in Paris"].task == "tests.scheduled"
    assert names["nightly in Paris"].timezone == "Europe/Paris"
    assert names["add every minute"].django_task
    assert names["add every minute"].task == "tests.djangotasks.add"
    install_declared = {
        r.name: r.action for r in schedules_install(now=datetime(2030, 1, 1, tzinfo=UTC))
    }
    assert install_declared == {"nightly in Paris": "added", "add every minute": "added"}
    fire_due(datetime(2030, 1, 1, 0, 1, tzinfo=UTC))
    job = Job.objects.get(payload__schedule="add every minute")
    assert job.task == "jobs.django_task"
    assert job.payload["kwargs"] == {
        "x": 1,
        "y": 2,
        "slot": "2030-01-01T00:01:00Z",
        "schedule": "add every minute",
    }


def test_a_tick_enqueues_the_slot_before_it_runs_and_a_twin_tick_adds_nothing(db):
    start = datetime(2030, 1, 1, tzinfo=UTC)
    install(ScheduleSpec(name="five", task="tests.record", every="5s"), now=start)
    assert fire_due(start + timedelta(seconds=4)).fired == 0
    assert fire_due(start + timedelta(seconds=5)).fired == 1
    assert fire_due(start + timedelta(seconds=5)).fired == 0
    assert fire_due(start + timedelta(seconds=9)).fired == 0
    job = Job.objects.get()
    assert job.status == "queued"  # visible before it runs
    assert job.payload == {"slot": "2030-01-01T00:00:05Z", "schedule": "five"}
    assert job.run_after == start + timedelta(seconds=5)
    assert job.idempotency_key == "schedule:five:2030-01-01T00:00:05Z"


@pytest.mark.parametrize(
    ("policy", "fired"),
    [
        ("skip", ["00:00:30"]),  # only the slot still within the grace
        ("last", ["00:00:30"]),
        ("all", ["00:00:10", "00:00:15", "00:00:20", "00:00:25", "00:00:30"]),
    ],
)
def test_missed_slots_follow_the_policy(db, settings, policy, fired):
    settings.CONVEYOR_SCHEDULE_GRACE = timedelta(seconds=2)
    start = datetime(2030, 1, 1, tzinfo=UTC)
    install(
        ScheduleSpec(name="p", task="tests.record", every="5s", missed=policy, missed_cap=5),
        now=start,
    )
    fire_due(start + timedelta(seconds=5))
    fire_due(start + timedelta(seconds=31))  # 00:10 .. 00:25 missed; 00:30 within the grace
    slots = sorted(Job.objects.values_list("payload__slot", flat=True))
    assert slots == ["2030-01-01T00:00:05Z"] + [f"2030-01-01T{t}Z" for t in fired]
    record = Schedule.objects.get().last_missed
    assert record["policy"] == policy and record["missed"] == 4 and record["due"] == 5


def test_last_fires_the_latest_slot_even_when_it_too_was_missed(db, settings):
    settings.CONVEYOR_SCHEDULE_GRACE = timedelta(seconds=2)
    start = datetime(2030, 1, 1, tzinfo=UTC)
    for policy in ("skip", "last"):
        install(
            ScheduleSpec(name=policy, task="tests.record", every="1h", missed=policy), now=start
        )
    fire_due(start + timedelta(hours=3, minutes=10))  # three hourly slots, all late
    assert list(Job.objects.values_list("payload__schedule", "payload__slot")) == [
        ("last", "2030-01-01T03:00:00Z")
    ]


def test_pause_resume_and_run_now_are_audited_and_run_now_takes_no_slot(db):
    start = datetime(2030, 1, 1, tzinfo=UTC)
    install(ScheduleSpec(name="five", task="tests.record", every="5s"), now=start)
    schedule_pause(name="five", actor="ops")
    assert fire_due(start + timedelta(seconds=20)).fired == 0
    run = schedule_run_now(name="five", actor="ops")
    assert run.kind == "manual" and run.requested_by == "ops"
    assert run.job.payload == {
        "slot": None,
        "run_now": True,
        "requested_by": "ops",
        "schedule": "five",
    }
    resumed_at = timezone.now()
    schedule_resume(name="five", actor="ops")
    row = Schedule.objects.get()
    assert row.next_slot > resumed_at  # from now on: the paused slots are not due
    actions = list(
        AuditLog.objects.filter(target_type="schedule")
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["schedule.pause", "schedule.run_now", "schedule.resume"]
    assert ScheduleRun.objects.filter(kind="slot").count() == 0
    with pytest.raises(UnknownSchedule):
        schedule_pause(name="nope", actor="ops")


def test_a_schedule_that_cannot_fire_holds_back_no_other(db):
    start = datetime(2030, 1, 1, tzinfo=UTC)
    install(
        ScheduleSpec(name="broken", task="tests.record", every="5s"),
        ScheduleSpec(name="fine", task="tests.record", every="5s"),
        now=start,
    )
    Schedule.objects.filter(name="broken").update(task="tests.gone")  # its code was removed
    result = fire_due(start + timedelta(seconds=5))
    assert (result.fired, result.failed) == (1, 1)
    assert list(Job.objects.values_list("payload__schedule", flat=True)) == ["fine"]
    broken = Schedule.objects.get(name="broken")
    assert broken.next_slot == start + timedelta(seconds=5)  # tried again next tick
    assert not ScheduleRun.objects.filter(schedule=broken).exists()


@pytest.mark.parametrize(
    ("action", "permission", "state"),
    [
        ("pause_selected", "jobs.pause_schedule", lambda: Schedule.objects.get().paused_by),
        ("run_selected_now", "jobs.run_schedule", lambda: ScheduleRun.objects.count()),
    ],
)
def test_the_schedule_actions_need_their_permission(db, action, permission, state):
    from tests.security.test_admin_permissions import staff_client

    install(ScheduleSpec(name="five", task="tests.record", every="5s"))
    pk = Schedule.objects.get().pk
    data = {"action": action, "_selected_action": [str(pk)]}
    viewer = staff_client("viewer")
    page = viewer.get("/admin/jobs/schedule/")
    assert page.status_code == 200 and "five" in page.content.decode()
    assert f'value="{action}"' not in page.content.decode()
    before = state()
    viewer.post("/admin/jobs/schedule/", data, follow=True)
    assert state() == before
    holder = staff_client("holder", permission)
    assert f'value="{action}"' in holder.get("/admin/jobs/schedule/").content.decode()
    holder.post("/admin/jobs/schedule/", data, follow=True)
    assert state() != before
