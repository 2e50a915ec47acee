"""The jobs list at 1440 px: one line a row, owner and last error in view, one time format.

Rows are measured in Chromium: each is one line of text tall, whatever the length of its
task, owner or error (cut with an ellipsis, whole in the title); the page needs no horizontal
scroll to show the owner and last-error columns. Times are in the operator's time zone
(TIME_ZONE, here Europe/Paris) to the second, with UTC on hover; the run time is the last
attempt's. Screenshots at 1440 and 1024 px go to ``var/test/screenshots/``.
"""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from deployments.services import deployment_create
from jobs.models import Job, JobStatus
from tests.browser.test_console import shot

STARTED = datetime(2026, 12, 3, 13, 5, 9, tzinfo=UTC)
LONG_ERROR = "RuntimeError: " + "the receiver said no, and said it at length " * 40

ROW_HEIGHTS = """() => [...document.querySelectorAll('#result_list tbody tr')].map(tr => {
  const td = tr.querySelector('td.field-short_error');
  const style = getComputedStyle(td);
  const line = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.5;
  const padding = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
  return {height: tr.getBoundingClientRect().height, oneLine: line + padding};
})"""


def make_job(status, **fields) -> Job:
    return Job.objects.create(
        **{"task": "tests.record", **fields},
        status=status,
        run_after=STARTED,
        created_at=STARTED,
        updated_at=STARTED,
    )


def test_the_jobs_list_fits_1440_px_one_line_a_row(admin_page, make_project, settings):
    settings.TIME_ZONE = "Europe/Paris"
    dead = make_job(
        JobStatus.DEAD,
        attempts=3,
        max_attempts=3,
        reason="exhausted",
        started_at=STARTED,
        finished_at=STARTED + timedelta(seconds=2.5),
        last_error=LONG_ERROR,
    )
    queued = make_job(JobStatus.QUEUED, task="tests." + "a_rather_long_task_name_" * 4)
    deployment = deployment_create(
        project=make_project("a-project-with-a-long-name"), ref="main", triggered_by="ci"
    )
    owned = Job.objects.get(pk=deployment.job_id)
    Job.objects.filter(pk=owned.pk).update(last_error="OSError: " + "disk full " * 30)
    row = "tr:has(a[href='/admin/jobs/job/{}/change/']) .field-{}"
    page = admin_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto("/admin/jobs/job/")
    assert page.locator("#result_list tbody tr").count() == 3
    for width in (1024, 1440):
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"jobs-list-{width}")

    # The navigation sidebar starts closed here (the list needs the width), for this page only.
    assert page.locator("#main").get_attribute("class") == "main"
    assert page.evaluate("localStorage.getItem('django.admin.navSidebarIsOpen')") is None

    # One line a row, however long the error, the task or the owner.
    for measured in page.evaluate(ROW_HEIGHTS):
        assert measured["height"] < 1.5 * measured["oneLine"], measured
    # Owner and last error are on screen: neither the page nor the table scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    results = page.locator("#changelist .results")
    assert results.evaluate("e => e.scrollWidth <= e.clientWidth")
    edge = results.bounding_box()
    for column in ("owner_link", "short_error"):
        box = page.locator(f"#result_list thead th.column-{column}").bounding_box()
        assert box["x"] + box["width"] <= edge["x"] + edge["width"] + 1, column
    owner = page.locator(row.format(owned.pk, "owner_link"))
    assert f"deployment {deployment.pk}" in owner.inner_text()

    # The error is cut on screen and whole in its title.
    error = page.locator(
        f"tr:has(a[href='/admin/jobs/job/{dead.pk}/change/']) .field-short_error .clip"
    )
    assert (
        error.get_attribute("title") == LONG_ERROR.strip()[:2000]
        or error.get_attribute("title") == LONG_ERROR[:2000]
    )
    assert error.evaluate("e => e.scrollWidth > e.clientWidth")

    # Times: local (Paris, UTC+1 in December) to the second, UTC on hover.
    created = page.locator(row.format(dead.pk, "created_at") + " time")
    local = STARTED.astimezone(ZoneInfo("Europe/Paris"))
    assert created.inner_text() == local.strftime("%Y-%m-%d %H:%M:%S") == "2026-12-03 14:05:09"
    created.hover()
    assert created.get_attribute("title") == "2026-12-03 13:05:09 UTC"

    # Run time: the last attempt's, blank for a job that has not run.
    row = "tr:has(a[href='/admin/jobs/job/{}/change/']) .field-run_time"
    assert page.locator(row.format(dead.pk)).inner_text().strip() == "2.5s"
    assert page.locator(row.format(queued.pk)).inner_text().strip() == ""
