"""The console under its Content-Security-Policy: nothing is blocked and the pages still work.

A listener on ``securitypolicyviolation`` (installed before any page script runs) and the
browser console collect every violation; the dashboard must still refresh itself, a running
deployment's log must still grow, and the jobs list and /api/v1/docs must still render.
"""

import pytest
from django.db import transaction

from deployments.models import Deployment
from deployments.services import deployment_create
from jobs.models import Job, JobStatus
from jobs.services import enqueue
from tests.browser.waiting import wait_for_js
from tests.conftest import WORKER_ENV as DEPLOY_ENV
from tests.processes import wait_until

COLLECT_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', e => {
  window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || 'inline'}`);
});
"""


@pytest.fixture
def watched_page(admin_page):
    """The admin's page, recording CSP violations from the DOM and the browser console."""
    console: list[str] = []
    admin_page.add_init_script(COLLECT_VIOLATIONS)
    admin_page.on(
        "console",
        lambda message: (
            console.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    admin_page.console_violations = console
    return admin_page


def violations(page) -> list[str]:
    return page.evaluate("window.__cspViolations || []") + page.console_violations


def test_the_console_sends_a_strict_policy(watched_page):
    response = watched_page.goto("/admin/dashboard/")
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_the_dashboard_refreshes_under_the_policy(watched_page, start_worker):
    page = watched_page
    page.goto("/admin/dashboard/")
    page.wait_for_selector("#dashboard-queues")
    page.evaluate("window.__notReloaded = true")
    with transaction.atomic():
        for _ in range(3):
            enqueue("tests.record", {}, queue="default")
    wait_for_js(
        page,
        "(document.querySelector('tr[data-queue=default] [data-stat=queued]') || {})"
        ".textContent === '3'",
    )
    start_worker(queues="default", concurrency=1)
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 3,
        message="the jobs to run",
    )
    wait_for_js(
        page,
        "document.querySelector('tr[data-queue=default] [data-stat=queued]').textContent === '0'",
    )
    assert page.evaluate("window.__notReloaded === true")
    assert violations(page) == []


def test_a_deployments_live_log_and_the_jobs_list_work_under_the_policy(
    watched_page, make_project, start_worker
):
    project = make_project(
        "live",
        pipelines={
            "default": [
                {
                    "name": "count",
                    "command": "for i in $(seq 1 100); do echo tick $i; sleep 0.2; done",
                }
            ]
        },
    )
    deployment = deployment_create(project=project, ref="main", triggered_by="ci")
    start_worker(queues="deployments", concurrency=1, env=DEPLOY_ENV)
    wait_until(
        lambda: Deployment.objects.filter(pk=deployment.pk, status="running").exists(),
        message="the deployment to start",
    )
    page = watched_page
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    page.evaluate("window.__notReloaded = true")
    wait_for_js(
        page, "document.querySelector('#deployment-log pre').textContent.includes('tick 3\\n')"
    )
    seen = page.locator("#deployment-log pre").inner_text()
    last = max(int(line.split()[1]) for line in seen.splitlines() if line.startswith("tick "))
    wait_for_js(
        page,
        f"document.querySelector('#deployment-log pre').textContent.includes('tick {last + 5}\\n')",
        timeout=15_000,
    )
    assert page.evaluate("window.__notReloaded === true")
    assert violations(page) == []

    page.goto("/admin/jobs/job/")
    page.wait_for_selector("#result_list tbody tr")
    assert violations(page) == []
    assert page.locator("#result_list .job-status").count() >= 1
    color = page.eval_on_selector("#result_list .job-status", "e => getComputedStyle(e).color")
    assert color != "rgb(0, 0, 0)"  # the status colour comes from console.css, not a style=
    page.goto("/admin/jobs/maintenancerun/")
    page.wait_for_selector("#maintenance-runners")
    assert violations(page) == []


def test_the_api_docs_render_under_the_policy(watched_page):
    page = watched_page
    page.goto("/api/v1/docs")
    page.wait_for_selector(".swagger-ui .info .title")
    page.wait_for_selector(".opblock-tag")
    assert violations(page) == []
