"""The operator console in a real browser, against a live server and real workers.

Screenshots of the dashboard, a deployment page and a job page are saved to
``var/test/screenshots/`` (CONVEYOR_VAR_DIR/screenshots) for a person to look at.
"""

import os
from pathlib import Path

import pytest
from django.db import transaction

from deployments.models import Deployment, DeploymentStatus
from deployments.services import deployment_create
from jobs.models import Job, JobStatus, WorkerHeartbeat
from jobs.services import enqueue
from tests.browser.waiting import wait_for_js
from tests.conftest import WORKER_ENV as DEPLOY_ENV
from tests.processes import wait_until
from tests.webhooks.conftest import WORKER_ENV as WEBHOOK_ENV
from tests.webhooks.conftest import allow_private, receiver  # noqa: F401 - fixtures
from tests.webhooks.receiver import Reply
from webhooks import services as webhooks
from webhooks.dispatch import notify
from webhooks.models import Delivery, DeliveryAttempt, DeliveryStatus

SCREENSHOTS = Path(os.environ.get("CONVEYOR_VAR_DIR", "var/test")) / "screenshots"
HEARTBEAT = {"CONVEYOR_WORKER_HEARTBEAT": "1s"}
SECRET = "s3cr3t-value-42"


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def mark_page(page) -> None:
    """Mark the loaded document: the mark survives only if the page is never reloaded."""
    page.evaluate("window.__notReloaded = true")


def not_reloaded(page) -> bool:
    return page.evaluate("window.__notReloaded === true")


def test_dashboard_counts_match_the_database_and_follow_running_jobs(admin_page, start_worker):
    with transaction.atomic():
        for _ in range(4):
            enqueue("tests.record", {}, queue="default")
    page = admin_page
    page.goto("/admin/")
    page.click("text=Dashboard")
    page.wait_for_selector("#dashboard-queues")
    row = page.locator("tr[data-queue=default]")
    queued = Job.objects.filter(queue="default", status=JobStatus.QUEUED).count()
    assert queued == 4
    assert row.locator("[data-stat=queued]").inner_text() == str(queued)
    assert row.locator("[data-stat=dead_letters]").inner_text() == "0"
    # The number links to the list it counts.
    href = row.locator("[data-stat=queued]").get_attribute("href")
    assert "queue=default" in href and "status__exact=queued" in href
    mark_page(page)

    worker = start_worker(queues="default", concurrency=1, env=HEARTBEAT)
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 4,
        message="the jobs to run",
    )
    wait_for_js(
        page,
        "document.querySelector('tr[data-queue=default] [data-stat=queued]').textContent === '0'",
    )
    page.wait_for_selector(f"#dashboard-workers tr.alive th:has-text('{worker.name}')")
    assert not_reloaded(page)
    assert WorkerHeartbeat.objects.filter(name__startswith=worker.name).exists()
    # The chart comes from the per-minute rollup, refreshed by the worker's account_jobs run.
    wait_for_js(
        page,
        "(document.querySelector('#dashboard-chart > div').getAttribute('aria-label') || '')"
        ".includes('4 succeeded')",
    )
    assert page.evaluate(
        "[...document.querySelectorAll('script[src],link[href],img[src]')]"
        ".every(e => !/^https?:/.test(e.getAttribute('src') || e.getAttribute('href')))"
    )
    shot(page, "dashboard")


@pytest.mark.usefixtures("allow_private")
def test_a_slow_deployment_is_followed_live_and_cancelled_from_its_page(
    admin_page,
    make_project,
    start_worker,
    receiver,  # noqa: F811
):
    project = make_project(
        "slowapp",
        pipelines={
            "slow": [
                {
                    "name": "count",
                    "command": f"for i in $(seq 1 150); do echo line $i token={SECRET}; "
                    "sleep 0.2; done",
                }
            ]
        },
        secrets={"API_TOKEN": SECRET},
    )
    webhooks.endpoint_create(url=receiver.url(), topics=["deployment.cancelled"])
    deployment = deployment_create(
        project=project, ref="main", pipeline="slow", triggered_by="ci-bot"
    )
    start_worker(queues="deployments", concurrency=1, env={**DEPLOY_ENV, **HEARTBEAT})
    start_worker(queues="webhooks,default", concurrency=1, env=WEBHOOK_ENV)
    wait_until(
        lambda: Deployment.objects.filter(pk=deployment.pk, status="running").exists(),
        message="the deployment to start",
    )
    page = admin_page
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    assert (
        "slowapp / production @ main" in page.locator("#content h1, #content h2").first.inner_text()
    )
    assert page.locator("input[name=_save]").count() == 0  # read-only
    mark_page(page)
    log = page.locator("#deployment-log pre")
    wait_for_js(
        page, "document.querySelector('#deployment-log pre').textContent.includes('line 3 ')"
    )
    first = log.inner_text()
    last = max(int(line.split()[1]) for line in first.splitlines() if line.startswith("line "))
    assert last < 140, "the deployment ran too far before the page looked"
    wait_for_js(
        page,
        f"document.querySelector('#deployment-log pre').textContent.includes('line {last + 5} ')",
        timeout=10_000,
    )
    grown = log.inner_text()
    assert len(grown) > len(first) and grown.startswith(first) and not_reloaded(page)
    assert SECRET not in grown and "token=***" in grown
    shot(page, "deployment-running")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#deployment-buttons input[name=cancel]")
    page.wait_for_selector(".messagelist")
    wait_until(
        lambda: Deployment.objects.get(pk=deployment.pk).status == DeploymentStatus.CANCELLED,
        message="the deployment to be cancelled",
    )
    wait_for_js(
        page, "document.querySelector('#deployment-status').textContent.trim() === 'cancelled'"
    )
    receiver.wait_for(1)
    # A finished deployment's page stops refreshing: a delivery made after it shows on reload.
    wait_until(
        lambda: DeliveryAttempt.objects.filter(
            delivery__event__type="deployment.cancelled"
        ).exists(),
        message="the delivery attempt to be recorded",
    )
    page.reload()
    page.wait_for_selector(
        "#deployment-timeline tr[data-kind=delivery_attempt]:has-text('deployment.cancelled')"
    )
    timeline = page.locator("#deployment-timeline").inner_text()
    assert "created by ci-bot" in timeline
    assert "claimed by worker" in timeline
    assert "cancel requested by admin" in timeline
    assert "finished cancelled (cancelled)" in timeline
    kinds = page.eval_on_selector_all(
        "#deployment-timeline tr[data-kind]", "rows => rows.map(r => r.dataset.kind)"
    )
    assert kinds.index("created") < kinds.index("claimed") < kinds.index("cancel_requested")
    assert kinds.index("cancel_requested") < kinds.index("finished")
    wait_for_js(
        page, "document.querySelector('#deployment-log .log-status').textContent === 'complete'"
    )
    shot(page, "deployment-cancelled")


@pytest.mark.usefixtures("allow_private")
def test_retry_of_a_dead_delivery_job_sends_the_same_webhook_again(
    admin_page,
    start_worker,
    receiver,  # noqa: F811
    settings,
):
    settings.CONVEYOR_WEBHOOK_MAX_ATTEMPTS = 1
    receiver.script("/hook", Reply(500, b"receiver is down"))
    webhooks.endpoint_create(url=receiver.url(), topics=["job.dead"])
    with transaction.atomic():
        notify("job.dead", {"title": "something died", "job_id": 0})
    delivery = Delivery.objects.get()
    start_worker(queues="webhooks,default", concurrency=1, env=WEBHOOK_ENV)
    wait_until(
        lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.DEAD,
        message="the delivery to die",
    )
    first = receiver.wait_for(1)[0]
    dead_job = Job.objects.get(pk=delivery.job_id)
    assert dead_job.status == JobStatus.DEAD

    page = admin_page
    page.goto(f"/admin/jobs/job/?status__exact=dead&task={dead_job.task}")
    page.click(f"#result_list a[href*='/jobs/job/{dead_job.pk}/change/']")
    page.wait_for_selector("#job-buttons")
    assert "DeliveryFailed: HTTP 500" in page.locator("#content").inner_text()
    assert f"delivery {delivery.pk}" in page.locator(".field-owner_link").inner_text()
    shot(page, "job-dead-delivery")
    receiver.script("/hook", Reply(200, b"ok"))
    page.click("#job-buttons input[name=retry]")
    page.wait_for_selector(".messagelist")
    assert "through its owner" in page.locator(".messagelist").inner_text()
    second = receiver.wait_for(2)[1]
    assert second.header("webhook-id") == first.header("webhook-id")
    wait_until(
        lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.DELIVERED,
        message="the delivery to be delivered",
    )
    page.goto(f"/admin/webhooks/delivery/{delivery.pk}/change/")
    attempts = page.locator("#delivery-attempts tbody tr")
    assert attempts.count() == 2
    assert "receiver is down" in page.locator("#delivery-attempts").inner_text()


def test_a_failed_deployment_is_found_from_the_jobs_list(admin_page, make_project, start_worker):
    project = make_project(
        "broken", pipelines={"default": [{"name": "fail", "command": "echo nope; exit 3"}]}
    )
    deployment = deployment_create(project=project, ref="main", triggered_by="ci-bot")
    start_worker(queues="deployments", concurrency=1, env=DEPLOY_ENV)
    wait_until(
        lambda: Deployment.objects.get(pk=deployment.pk).status == DeploymentStatus.FAILED,
        message="the deployment to fail",
    )
    wait_until(  # the deployment's end is written by its body, the job's a moment after
        lambda: Job.objects.get(pk=deployment.job_id).status == JobStatus.SUCCEEDED,
        message="the deployment's job to end succeeded",
    )
    page = admin_page
    page.goto("/admin/jobs/job/")
    page.click("#changelist-filter a:has-text('Owner failed')")
    page.wait_for_url("**owner=failed**")
    page.wait_for_selector("#result_list tbody tr")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    assert "failed" in rows.first.locator(".field-owner_link").inner_text()
    page.click(f"#result_list .field-owner_link a:has-text('deployment {deployment.pk}')")
    page.wait_for_selector("#deployment-status")
    assert page.locator("#deployment-status").inner_text() == "failed"
    assert "exit 3" in page.locator("#deployment-timeline").inner_text()
    assert page.locator("#deployment-buttons input[name=retry]").count() == 1
