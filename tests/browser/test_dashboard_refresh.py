"""The dashboard refreshes in place from its small JSON endpoint, never by reloading itself."""

from django.db import transaction

from jobs.models import Job, JobStatus
from jobs.services import enqueue
from tests.browser.test_console import HEARTBEAT, mark_page, not_reloaded
from tests.browser.waiting import wait_for_js
from tests.processes import wait_until


def test_the_dashboard_refreshes_in_place_from_its_json_endpoint(admin_page, start_worker):
    page = admin_page
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto("/admin/dashboard/")
    row = page.locator("tr[data-queue=default]")
    assert row.locator("[data-stat=queued]").inner_text() == "0"
    mark_page(page)
    loaded = len(requested)

    with transaction.atomic():
        for _ in range(3):
            enqueue("tests.record", {}, queue="default")
    wait_for_js(
        page,
        "document.querySelector('tr[data-queue=default] [data-stat=queued]').textContent === '3'",
    )
    start_worker(queues="default", concurrency=1, env=HEARTBEAT)
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 3,
        message="the jobs to run",
    )
    wait_for_js(
        page,
        "document.querySelector('tr[data-queue=default] [data-stat=queued]').textContent === '0'"
        " && (document.querySelector('#dashboard-chart > div').getAttribute('aria-label') || '')"
        ".includes('3 succeeded')",
    )
    assert not_reloaded(page)
    later = [url for url in requested[loaded:] if "/admin/" in url]
    assert later and all("/admin/dashboard/data.json" in url for url in later), later
