"""An operator filters the Jobs list by payload and retries everything matching, in a browser."""

from django.db import transaction

from jobs import services
from jobs.models import AuditLog, BulkOperation, Job, JobStatus
from tests.browser.waiting import wait_for_js


def _dead(n: int, region: str) -> list[int]:
    with transaction.atomic():
        jobs = services.enqueue_many("jobs.noop", [{"region": region, "n": i} for i in range(n)])
        ids = [job.pk for job in jobs]
        Job.objects.filter(pk__in=ids).update(status=JobStatus.DEAD, last_error="ValueError: x")
    return ids


def test_filter_by_payload_then_retry_all_matching_and_watch_it(
    admin_page, start_worker, purge_broker
):
    eu = _dead(60, "eu")  # more than the list's page of 50
    us = _dead(4, "us")
    purge_broker()
    page = admin_page
    page.goto("/admin/jobs/job/?status__exact=dead")
    page.fill("input[name=payload]", "region=eu")
    page.press("input[name=payload]", "Enter")
    page.wait_for_url("**payload=region*")
    assert page.locator("#result_list tbody tr").count() == 50
    page.click("a.bulk-retry")
    assert page.locator("#bulk-count").inner_text() == "60"
    assert "payload=region=eu" in page.locator("#bulk-filter").inner_text()
    page.click("#bulk-confirm-button")
    page.wait_for_selector("#bulk-progress")
    assert "started in job" in page.locator(".messagelist").inner_text()
    start_worker(concurrency=1, queues="default")
    # The page refreshes itself (console.js) until the operation is done.
    # Done comes after the last batch's count (a refresh may show 60 while still running).
    done = "document.querySelector('#bulk-status').textContent.trim() === 'Done'"
    wait_for_js(page, done, 60_000)
    assert page.locator("#bulk-done").inner_text() == "60"
    operation = BulkOperation.objects.get()
    assert (operation.done, operation.failed) == (60, 0)
    assert Job.objects.filter(pk__in=eu, status=JobStatus.DEAD).count() == 0
    assert Job.objects.filter(pk__in=us, status=JobStatus.DEAD).count() == 4
    assert AuditLog.objects.filter(action="job.bulk_retry", actor="admin").count() == 1
