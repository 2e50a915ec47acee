"""The schedules page in Chromium, and the schedules' metric read by prometheus-client."""

import re
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.utils import timezone
from playwright.sync_api import expect
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import AuditLog, Job, JobStatus, Schedule, ScheduleRun
from jobs.schedules import ScheduleSpec
from jobs.schedules.fire import fire_due
from tests.browser.test_console import shot
from tests.browser.test_csp import COLLECT_VIOLATIONS
from tests.processes import wait_until
from tests.schedules.conftest import install

PARIS = ZoneInfo("Europe/Paris")


def next_three_am_in_paris(now: datetime) -> datetime:
    """Worked out here without the scheduler: the next 03:00 on Paris's wall clock."""
    day = now.astimezone(PARIS).date()
    while True:
        candidate = datetime.combine(day, time(3), tzinfo=PARIS)
        if candidate > now:
            return candidate
        day += timedelta(days=1)


def row(page, name: str):
    return page.locator("#result_list tbody tr").filter(has=page.get_by_text(name, exact=True))


def act(page, name: str, action: str) -> None:
    pk = Schedule.objects.get(name=name).pk
    page.check(f"input[name=_selected_action][value='{pk}']")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def test_the_schedules_page_shows_slots_runs_and_policy_and_its_actions_work(
    admin_page, start_worker, settings
):
    settings.CONVEYOR_METRICS_ALLOW = "127.0.0.1"
    page = admin_page
    page.add_init_script(COLLECT_VIOLATIONS)
    now = timezone.now()
    install(
        ScheduleSpec(
            name="nightly", task="tests.record", cron="0 3 * * *", timezone="Europe/Paris"
        ),
        ScheduleSpec(name="five", task="tests.record", every="5s", payload={"sleep": 0.2}),
        ScheduleSpec(name="hourly", task="tests.record", every="1h", missed="last"),
        now=now - timedelta(hours=3, minutes=10),  # the hourly one: three or four slots due
    )
    # The nightly one is due from now on, whatever the time of day: back-dated with the rest,
    # a run between 02:00 and 05:10 UTC would have had its 03:00 Paris slot fall due.
    Schedule.objects.filter(name="nightly").update(next_slot=next_three_am_in_paris(now))
    fired_at = timezone.now()
    fire_due(fired_at)  # both every-N schedules missed slots: policy last runs the latest once
    # Worked out here: the hour boundaries since the install, and those over a minute late.
    installed = now - timedelta(hours=3, minutes=10)
    hours = [
        datetime.fromtimestamp(3600 * k, UTC)
        for k in range(
            int(installed.timestamp()) // 3600 + 1, int(fired_at.timestamp()) // 3600 + 1
        )
    ]
    late = [hour for hour in hours if fired_at - hour > timedelta(minutes=1)]
    start_worker(queues="default", concurrency=1)
    wait_until(
        lambda: (
            Job.objects.count() >= 2
            and not Job.objects.exclude(status=JobStatus.SUCCEEDED).exists()
        ),
        timeout=60,
        message="the fired jobs to run",
    )

    page.goto("/admin/jobs/schedule/")
    nightly = row(page, "nightly")
    first = next_three_am_in_paris(timezone.now())
    expect(nightly.locator(".schedule-slot").first).to_have_text(
        f"{first:%Y-%m-%d %H:%M:%S} {first.tzname()} · {first.astimezone(UTC):%H:%M:%S} UTC"
    )
    expect(nightly.locator(".schedule-slot")).to_have_count(3)
    expect(nightly.locator(".field-last_runs")).to_have_text("none yet")
    five = row(page, "five")
    job = Job.objects.filter(payload__schedule="five").order_by("-pk").first()
    expect(five.locator(".schedule-run").first).to_have_text(
        re.compile(
            rf"^slot {job.payload['slot'][:10]} {job.payload['slot'][11:19]} UTC: "
            # at least the body's 0.2 s sleep; a loaded machine may take over a second
            rf"job {job.pk} succeeded in (0\.[2-9]|[1-9]\d*\.)\d+s$"
        )
    )
    expect(row(page, "hourly").locator(".schedule-missed")).to_have_text(
        f"last applied at {fired_at:%Y-%m-%d %H:%M:%S} UTC: "
        f"{len(late)} of {len(hours)} due slots missed, 1 run"
    )

    act(page, "nightly", "pause_selected")
    expect(page.locator(".messagelist")).to_have_text("Paused: nightly.")
    expect(row(page, "nightly").locator(".field-state")).to_have_text("paused by admin")
    expect(row(page, "nightly").locator(".field-next_slots")).to_have_text("—")
    act(page, "nightly", "resume_selected")
    expect(row(page, "nightly").locator(".field-state")).to_have_text("active")

    next_slot = Schedule.objects.get(name="hourly").next_slot
    act(page, "hourly", "run_selected_now")
    expect(page.locator(".messagelist")).to_have_text("Enqueued a run now of: hourly.")
    expect(row(page, "hourly").locator(".schedule-run").first).to_have_text(
        re.compile(r"^run now .* UTC: job \d+ (queued|running|succeeded)")
    )
    assert Schedule.objects.get(name="hourly").next_slot == next_slot  # no slot taken
    assert ScheduleRun.objects.filter(schedule__name="hourly", kind="manual").count() == 1
    audited = AuditLog.objects.filter(target_type="schedule").order_by("pk")
    assert [(a.action, a.actor, a.target_id) for a in audited] == [
        ("schedule.pause", "admin", "nightly"),
        ("schedule.resume", "admin", "nightly"),
        ("schedule.run_now", "admin", "hourly"),
    ]
    assert page.evaluate("window.__cspViolations || []") == []
    page.set_viewport_size({"width": 1440, "height": 900})
    shot(page, "schedules-1440")

    response = page.request.get("/metrics")
    assert response.status == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text())}
    ages = {
        sample.labels["schedule"]: sample.value
        for sample in families["conveyor_schedule_last_success_age_seconds"].samples
    }
    assert set(ages) == {"nightly", "five", "hourly"}
    assert 0 <= ages["five"] < 60  # it succeeded a moment ago
    assert ages["nightly"] > 3 * 3600  # never succeeded: since it was installed
