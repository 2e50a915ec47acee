"""The Tasks pages in a real browser, against a live server and a real worker.

Jobs of a Celery task and django.tasks functions run on a worker; the Tasks page and a task's
page must show what jobs_job says (counts, the slowest run) under the function paths, and
nothing the page needs is blocked by the console's CSP. Screenshots at 1440 and 1024 px wide
are saved to ``var/test/screenshots/``.
"""

from django.contrib.auth import get_user_model
from django.db import transaction
from playwright.sync_api import expect

from jobs.accounting import rollup
from jobs.models import Job, JobStatus
from jobs.services import enqueue
from tests import djangotasks
from tests.browser.conftest import PASSWORD
from tests.browser.test_console import shot
from tests.browser.test_csp import COLLECT_VIOLATIONS
from tests.processes import wait_until

WIDTHS = (1440, 1024)


def shots(page, name: str) -> None:
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"{name}-{width}")


def cell(page, task: str, stat: str) -> str:
    return page.locator(f"#tasks-table tr[data-task='{task}'] [data-stat={stat}]").inner_text()


def test_the_tasks_pages_show_what_the_worker_ran(admin_page, start_worker):
    page = admin_page
    page.add_init_script(COLLECT_VIOLATIONS)
    with transaction.atomic():
        for sleep in (0, 0.2, 0.6):
            enqueue("tests.record", {"sleep": sleep}, queue="default")
        enqueue("tests.permanent", {}, queue="default")
    djangotasks.add.enqueue(2, 3)
    djangotasks.fails.enqueue("on purpose")
    start_worker(queues="default", concurrency=1)
    wait_until(
        lambda: Job.objects.filter(status__in=[JobStatus.SUCCEEDED, JobStatus.DEAD]).count() == 6,
        timeout=90,
        message="the six jobs to end",
    )
    rollup.refresh()  # the worker's account_jobs does it too; this makes it now

    page.goto("/admin/")
    page.click("#content-main a[href='/admin/tasks/']")
    page.wait_for_selector("#tasks-table")
    # The sidebar lists the page beside the dashboard, marked as the current one.
    expect(page.locator("#nav-sidebar a[aria-current=page]")).to_have_text("Tasks")
    assert cell(page, "tests.record", "executions") == "3"
    assert cell(page, "tests.permanent", "failures") == "1"
    assert cell(page, "tests.permanent", "failure_rate") == "100.0%"
    assert cell(page, "tests.djangotasks.add", "executions") == "1"
    assert cell(page, "tests.djangotasks.fails", "failures") == "1"
    assert page.locator("#tasks-table tr[data-task='jobs.django_task']").count() == 0
    slowest = max(
        (job.finished_at - job.started_at).total_seconds()
        for job in Job.objects.filter(task="tests.record")
    )
    shown = float(
        page.locator("#tasks-table tr[data-task='tests.record'] [data-stat=run_max]")
        .get_attribute("data-seconds")
        .replace(",", ".")
    )
    assert abs(shown - slowest) < 0.01 and shown >= 0.6
    shots(page, "tasks")

    page.click("#tasks-table tr[data-task='tests.record'] th a")
    page.wait_for_selector("#task-run-chart svg")
    assert page.locator("#task-figures [data-stat=executions]").inner_text() == "3"
    assert page.locator("#task-queues tr[data-queue=default] [data-stat=executions]").count()
    assert page.locator("#task-run-chart [data-point]").count() >= 2  # p50, p95 of the minute
    shots(page, "task-page")
    page.click("text=all its jobs")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 3

    page.goto("/admin/tasks/?window=24h")
    page.click("#tasks-table tr[data-task='tests.djangotasks.add'] th a")
    page.wait_for_selector("#task-figures")
    page.click("text=all its jobs")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list td.field-task_name").all_inner_texts() == [
        "tests.djangotasks.add"
    ]

    page.goto("/admin/dashboard/")
    busiest = page.locator("#dashboard-runtimes [data-panel=busiest] tbody tr").first
    assert busiest.get_attribute("data-task") == "tests.record"
    assert busiest.locator("[data-stat=executions]").inner_text() == "3"
    shots(page, "dashboard-runtimes")
    page.click("#dashboard-runtimes [data-panel=slowest] tr[data-task='tests.record'] th a")
    page.wait_for_selector("#task-figures")
    assert page.evaluate("window.__cspViolations") == []


def test_the_tasks_pages_are_refused_without_the_permission(page, transactional_db):
    get_user_model().objects.create_user("staff", password=PASSWORD, is_staff=True)
    page.goto("/admin/login/")
    page.fill("#id_username", "staff")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    assert page.locator("a[href='/admin/tasks/']").count() == 0
    assert page.goto("/admin/tasks/").status == 403
    assert page.goto("/admin/tasks/tests.record/").status == 403
