"""The deployment page asks the server only while there is something to follow.

Counted in a real browser from the requests the page makes: a finished deployment's page
makes none once it has shown the end, a page waiting for approval never follows the (empty)
log and checks its status only slowly, and a hidden tab makes none until it is shown again.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q

from deployments.approvals import deployment_approve
from deployments.environments import Approver
from deployments.models import Environment
from deployments.services import deployment_create
from deployments.transitions import transition
from tests.browser.waiting import wait_for_js

LOG = "/log/?offset="

HIDE = """
Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});
Object.defineProperty(document, 'hidden', {value: true, configurable: true});
document.dispatchEvent(new Event('visibilitychange'));
"""
SHOW = """
Object.defineProperty(document, 'visibilityState', {value: 'visible', configurable: true});
Object.defineProperty(document, 'hidden', {value: false, configurable: true});
document.dispatchEvent(new Event('visibilitychange'));
"""


def recorder(page) -> list[str]:
    """Record the URL of every request the page makes from now on (admin pages only)."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url))
    return seen


def admin_requests(seen: list[str], since: int) -> list[str]:
    return [url for url in seen[since:] if "/admin/" in url]


def running(project):
    deployment = deployment_create(project=project, ref="main", triggered_by="ci-bot")
    transition(Q(pk=deployment.pk), "running", from_=["pending"])
    return deployment


def open_page(page, deployment) -> None:
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    page.wait_for_selector("#deployment-status")


def test_a_finished_deployment_page_stops_asking(admin_page, make_project):
    page = admin_page
    seen = recorder(page)
    deployment = running(make_project("app"))
    open_page(page, deployment)
    wait_for_js(
        page, "document.querySelector('#deployment-log .log-status').textContent === 'following…'"
    )
    page.wait_for_timeout(2000)
    assert any(LOG in url for url in seen), "a running deployment's page follows its log"

    transition(Q(pk=deployment.pk), "success", from_=["running"])
    wait_for_js(page, "document.querySelector('#deployment-status').textContent === 'success'")
    wait_for_js(
        page, "document.querySelector('#deployment-log .log-status').textContent === 'complete'"
    )
    settled = len(seen)
    page.wait_for_timeout(5000)
    assert admin_requests(seen, settled) == []

    # Opened once it has finished, the page asks nothing at all.
    open_page(page, deployment)
    loaded = len(seen)
    page.wait_for_timeout(3000)
    assert admin_requests(seen, loaded) == []


def test_a_page_waiting_for_approval_checks_slowly_and_notices_an_approval(
    admin_page, make_project
):
    project = make_project("shop")
    Environment.objects.create(
        project=project, name="production", protected=True, required_approvals=1
    )
    deployment = deployment_create(project=project, ref="main", triggered_by="ci-bot")
    assert deployment.status == "waiting_approval"
    page = admin_page
    seen = recorder(page)
    open_page(page, deployment)
    loaded = len(seen)
    page.wait_for_timeout(5000)
    asked = admin_requests(seen, loaded)
    assert not [url for url in asked if LOG in url]
    assert len(asked) <= 1, asked  # at most the slow status check

    # Someone else approves it: the page notices within a slow check or two.
    bob = get_user_model().objects.create_user("bob", is_staff=True)
    bob.user_permissions.set(Permission.objects.filter(codename="approve_deployment"))
    deployment_approve(deployment_id=deployment.pk, approver=Approver(name="bob", user=bob))
    # It reloads itself once the wait is over: the log box comes back, the panel goes.
    page.wait_for_selector("#deployment-log", timeout=25_000)
    assert page.locator("#deployment-status").inner_text() == "pending"
    assert page.locator("#deployment-approval").count() == 0
