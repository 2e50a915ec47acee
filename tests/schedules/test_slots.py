"""Slots across the 2027 clock changes, worked out by hand; and the tick across a change.

Europe/Paris changes at 01:00 UTC: 2027-03-28 (02:00 CET -> 03:00 CEST) and 2027-10-31
(03:00 CEST -> 02:00 CET). America/New_York changes 2027-03-14 at 07:00 UTC (02:00 EST ->
03:00 EDT) and 2027-11-07 at 06:00 UTC (02:00 EDT -> 01:00 EST).
"""

from datetime import datetime, timedelta
from itertools import islice, takewhile
from zoneinfo import ZoneInfo

import pytest

from jobs.models import Job, Schedule, ScheduleRun
from jobs.schedules.cron import BadCron, Cron, cron_slots, interval_slots
from jobs.schedules.fire import fire_due
from jobs.schedules.services import schedules_install
from jobs.schedules.spec import ScheduleSpec, resolve


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def slots(expression: str, zone: str, start: str, end: str) -> list[str]:
    found = cron_slots(Cron.parse(expression), ZoneInfo(zone), z(start))
    return [s.strftime("%Y-%m-%dT%H:%MZ") for s in takewhile(lambda s: s <= z(end), found)]


EVERY_HALF_HOUR_1_TO_3 = "*/30 1-3 * * *"  # 01:00, 01:30, 02:00, 02:30, 03:00, 03:30 local

# (zone, the night around the change, the slots in UTC), worked out by hand.
TABLE = [
    # Paris, spring: 02:00 and 02:30 do not exist; both run once at 03:00 CEST (01:00Z),
    # which is also 03:00's own slot: one job.
    (
        "Europe/Paris",
        ("2027-03-27T22:00Z", "2027-03-28T04:00Z"),
        ["2027-03-28T00:00Z", "2027-03-28T00:30Z", "2027-03-28T01:00Z", "2027-03-28T01:30Z"],
    ),
    # Paris, autumn: 02:00 and 02:30 happen twice; they run at the first (CEST) only.
    (
        "Europe/Paris",
        ("2027-10-30T22:00Z", "2027-10-31T04:00Z"),
        [
            "2027-10-30T23:00Z",  # 01:00 CEST
            "2027-10-30T23:30Z",  # 01:30 CEST
            "2027-10-31T00:00Z",  # 02:00 CEST (not 01:00Z, 02:00 CET)
            "2027-10-31T00:30Z",  # 02:30 CEST (not 01:30Z, 02:30 CET)
            "2027-10-31T02:00Z",  # 03:00 CET
            "2027-10-31T02:30Z",  # 03:30 CET
        ],
    ),
    # New York, spring: 02:00 and 02:30 EST do not exist; once at 03:00 EDT (07:00Z).
    (
        "America/New_York",
        ("2027-03-14T04:00Z", "2027-03-14T10:00Z"),
        ["2027-03-14T06:00Z", "2027-03-14T06:30Z", "2027-03-14T07:00Z", "2027-03-14T07:30Z"],
    ),
    # New York, autumn: 01:00 and 01:30 happen twice; they run at the first (EDT) only.
    (
        "America/New_York",
        ("2027-11-07T03:00Z", "2027-11-07T10:00Z"),
        [
            "2027-11-07T05:00Z",  # 01:00 EDT (not 06:00Z, 01:00 EST)
            "2027-11-07T05:30Z",  # 01:30 EDT (not 06:30Z, 01:30 EST)
            "2027-11-07T07:00Z",  # 02:00 EST
            "2027-11-07T07:30Z",  # 02:30 EST
            "2027-11-07T08:00Z",  # 03:00 EST
            "2027-11-07T08:30Z",  # 03:30 EST
        ],
    ),
]


@pytest.mark.parametrize(("zone", "night", "expected"), TABLE)
def test_slots_across_the_2027_changes_match_the_table(zone, night, expected):
    assert slots(EVERY_HALF_HOUR_1_TO_3, zone, *night) == expected


def test_a_daily_time_in_the_missing_and_the_repeated_hour_runs_once_a_day():
    # 02:30 every day in Paris: on the spring day at 03:00 CEST, on the autumn day at the
    # first 02:30 (CEST); the days around keep their offsets.
    spring = slots("30 2 * * *", "Europe/Paris", "2027-03-26T12:00Z", "2027-03-29T12:00Z")
    assert spring == ["2027-03-27T01:30Z", "2027-03-28T01:00Z", "2027-03-29T00:30Z"]
    autumn = slots("30 2 * * *", "Europe/Paris", "2027-10-29T12:00Z", "2027-11-01T12:00Z")
    assert autumn == ["2027-10-30T00:30Z", "2027-10-31T00:30Z", "2027-11-01T01:30Z"]
    # New York at 01:30: the autumn day's is the first (EDT) one.
    ny = slots("30 1 * * *", "America/New_York", "2027-11-06T12:00Z", "2027-11-08T12:00Z")
    assert ny == ["2027-11-07T05:30Z", "2027-11-08T06:30Z"]


def test_cron_fields_macros_and_day_rules():
    # Weekdays at 09:00 in Tokyo (no DST): 2027-01-01 is a Friday.
    found = slots("0 9 * * mon-fri", "Asia/Tokyo", "2026-12-31T23:00Z", "2027-01-04T12:00Z")
    assert found == ["2027-01-01T00:00Z", "2027-01-04T00:00Z"]
    # Day of month and day of week both restricted: either matches (as cron does).
    found = slots("0 0 13 * fri", "UTC", "2027-08-01T00:00Z", "2027-08-16T00:00Z")
    assert found == ["2027-08-06T00:00Z", "2027-08-13T00:00Z"]
    assert slots("@daily", "UTC", "2027-01-01T00:00Z", "2027-01-02T00:00Z") == ["2027-01-02T00:00Z"]
    for bad in ("* * * *", "61 * * * *", "* 25 * * *", "* * * * funday"):
        with pytest.raises(BadCron):
            Cron.parse(bad)


def test_interval_slots_are_multiples_of_the_interval_since_the_epoch():
    after = z("2027-03-28T01:00:03Z")
    found = list(islice(interval_slots(timedelta(seconds=5), after), 3))
    assert found == [
        z("2027-03-28T01:00:05Z"),
        z("2027-03-28T01:00:10Z"),
        z("2027-03-28T01:00:15Z"),
    ]
    assert next(interval_slots(timedelta(seconds=5), z("2027-03-28T01:00:05Z"))) == z(
        "2027-03-28T01:00:10Z"
    )


def tick_across(start: datetime, end: datetime, step: timedelta) -> None:
    """Two ticks at every step from ``start`` to ``end``, as two beats would send."""
    now = start
    while now <= end:
        fire_due(now)
        fire_due(now)
        now += step


@pytest.mark.parametrize(
    ("night", "expected"),
    [
        (
            ("2027-03-28T00:40Z", "2027-03-28T01:40Z"),
            # 01:45 CET; 02:00-02:45 do not exist and run once with 03:00 CEST; then on.
            ["2027-03-28T00:45Z", "2027-03-28T01:00Z", "2027-03-28T01:15Z", "2027-03-28T01:30Z"],
        ),
        (
            ("2027-10-30T23:40Z", "2027-10-31T02:10Z"),
            # 01:45 .. 02:45 CEST, then the repeated 02:00 .. 02:45 (CET) do not run again.
            [
                "2027-10-30T23:45Z",
                "2027-10-31T00:00Z",
                "2027-10-31T00:15Z",
                "2027-10-31T00:30Z",
                "2027-10-31T00:45Z",
                "2027-10-31T02:00Z",
            ],
        ),
    ],
)
def test_the_tick_fires_each_slot_once_across_a_simulated_change(db, night, expected):
    start, end = z(night[0]), z(night[1])
    schedules_install(
        [resolve(ScheduleSpec(name="quarterly", task="tests.record", cron="*/15 * * * *",
                              timezone="Europe/Paris"))],
        now=start,
    )  # fmt: skip
    tick_across(start, end, timedelta(seconds=20))
    fired = sorted(Job.objects.values_list("payload__slot", flat=True))
    assert fired == [slot.replace("Z", ":00Z") for slot in expected]
    assert ScheduleRun.objects.count() == len(expected)
    assert Schedule.objects.get().last_missed == {}  # every slot seen within the grace
