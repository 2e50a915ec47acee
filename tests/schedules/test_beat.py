"""Schedules under real processes: two beats, and beat stopped for five slots."""

import itertools
import time
from datetime import timedelta

import pytest

from jobs.models import AuditLog, Job, JobStatus, Schedule, ScheduleRun
from jobs.schedules import ScheduleSpec
from tests.processes import wait_until
from tests.schedules.conftest import TICK, install, slots_of, tick_every_second

pytestmark = pytest.mark.slow
FIVE = timedelta(seconds=5)


def test_two_beats_make_exactly_one_job_per_slot(start_worker, start_beat, settings):
    install(
        ScheduleSpec(name="every-5s", task="tests.record", every="5s"),
        ScheduleSpec(name="every-1s", task="tests.record", every="1s", payload={"n": 1}),
    )
    tick_every_second(settings)
    start_worker(queues="maintenance,default", concurrency=2)
    # At DEBUG: beat logs sending the tick only then (project.logging.QuietTicks).
    beats = [start_beat({"CONVEYOR_LOG_LEVEL": "DEBUG"}) for _ in range(2)]
    time.sleep(50)  # ten slots of the 5s schedule, fifty of the 1s one
    for beat in beats:
        beat.stop()
    time.sleep(2)  # the last tick in flight

    assert all(beat.sent(TICK) >= 35 for beat in beats)  # both beats ticked all along
    for name, every, least in (("every-5s", FIVE, 9), ("every-1s", timedelta(seconds=1), 45)):
        slots = slots_of(name)
        assert len(slots) >= least, (name, len(slots))
        assert len(set(slots)) == len(slots), f"{name}: a slot has two jobs"
        gaps = {b - a for a, b in itertools.pairwise(slots)}
        assert gaps == {every}, f"{name}: slots skipped: {sorted(gaps)}"
        assert ScheduleRun.objects.filter(schedule__name=name).count() == len(slots)
    # Every job is a real one that ran: one execution each.
    total = Job.objects.count()
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == total,
        timeout=30,
        message="every slot's job to run",
    )
    assert AuditLog.objects.filter(action="test.executed").count() == total
    assert not Schedule.objects.exclude(last_missed={}).exists()  # nothing was late


def test_after_beat_is_stopped_for_five_slots_each_policy_does_what_it_says(
    start_worker, start_beat, settings
):
    install(
        *(
            ScheduleSpec(name=f"missed-{policy}", task="tests.record", every="5s", missed=policy)
            for policy in ("skip", "last", "all")
        )
    )
    tick_every_second(settings)
    # A slot seen more than 2s late is missed (the default, 1m, would hide a short stop).
    worker = start_worker(queues="maintenance,default", env={"CONVEYOR_SCHEDULE_GRACE": "2s"})
    beat = start_beat()
    names = ("missed-skip", "missed-last", "missed-all")
    # Each has run twice (a slow start may have seen an early slot late, and skipped it).
    wait_until(
        lambda: all(len(slots_of(name)) >= 2 for name in names), timeout=60, message="two slots"
    )
    beat.stop()
    time.sleep(1.5)  # a tick in flight
    # Forget a slot a tick saw late while the worker was starting: only the stop counts.
    Schedule.objects.update(last_missed={}, last_missed_at=None)
    before = {name: slots_of(name) for name in names}
    last = max(slots[-1] for slots in before.values())
    assert all(slots[-1] == last for slots in before.values())
    time.sleep(27)  # the 5 slots after ``last`` pass with no beat
    beat = start_beat()
    after_restart = wait_until(
        lambda: (
            Schedule.objects.exclude(last_missed={}).count() == 3
            and {name: slots_of(name) for name in before}
        ),
        timeout=30,
        message="each schedule to apply its policy",
    )
    stopped = [last + FIVE * n for n in range(1, 6)]  # the five slots beat was away for

    records = {row.name: row.last_missed for row in Schedule.objects.all()}
    for name, record in records.items():
        assert record["policy"] == name.removeprefix("missed-")
        assert record["missed"] >= 5, record

    def new(name):
        return [slot for slot in after_restart[name] if slot > last]

    skip, last_one, each = new("missed-skip"), new("missed-last"), new("missed-all")
    # skip: none of the stopped slots; at most the one still within the grace.
    assert not set(skip) & set(stopped), skip
    assert len(skip) <= 1
    # last: one job, for the latest due slot, none for the slots before it.
    assert len(last_one) == 1 and last_one[0] >= stopped[-1], last_one
    assert records["missed-last"]["fired"] == [f"{last_one[0]:%Y-%m-%dT%H:%M:%S}Z"]
    # all: every stopped slot, once each, oldest first (under the cap of 10).
    assert set(stopped) <= set(each) and len(each) == len(set(each)), each
    # The log says which policy was applied.
    logged = {line["schedule"]: line["policy"] for line in worker.events("schedule.missed")}
    # (the last line of each: a slot seen late while the worker started may come before)
    assert logged == {"missed-skip": "skip", "missed-last": "last", "missed-all": "all"}
    # And the schedules go on: the next slot fires normally for each.
    resumed = max(after_restart["missed-all"]) + FIVE
    wait_until(
        lambda: all(resumed in slots_of(name) for name in before),
        timeout=20,
        message="the next slot after the restart",
    )
