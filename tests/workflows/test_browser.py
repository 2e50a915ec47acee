"""The workflow page in a real browser, under the console's Content-Security-Policy."""

from playwright.sync_api import expect

from jobs.models import Job
from tests.browser.conftest import admin_page, page  # noqa: F401 - the browser fixtures
from tests.browser.test_csp import COLLECT_VIOLATIONS
from tests.workflows.test_console import _diamond


def test_the_graph_shows_each_jobs_state_and_links_to_it(admin_page):  # noqa: F811
    flow = _diamond()
    top, left, right, join = Job.objects.filter(workflow=flow).order_by("id")
    admin_page.add_init_script(COLLECT_VIOLATIONS)
    admin_page.goto(f"/admin/jobs/workflow/{flow.pk}/change/")
    expect(admin_page.locator("#workflow-status")).to_have_text("running")
    nodes = admin_page.locator("svg.workflow-graph a[data-job]")
    expect(nodes).to_have_count(4)
    expect(admin_page.locator(f'svg a[data-job="{top.pk}"]')).to_have_attribute(
        "data-status", "succeeded"
    )
    expect(
        admin_page.locator(f'#workflow-jobs tr[data-job="{left.pk}"] .node-status')
    ).to_have_text("queued")
    expect(
        admin_page.locator(f'#workflow-jobs tr[data-job="{join.pk}"] .node-status')
    ).to_have_text("waiting")
    assert admin_page.evaluate("window.__cspViolations") == []
    admin_page.locator(f'svg a[data-job="{right.pk}"]').click()
    admin_page.wait_for_url(f"**/admin/jobs/job/{right.pk}/change/")
