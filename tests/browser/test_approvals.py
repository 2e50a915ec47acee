"""A deployment waiting for approval, decided in the console by the people allowed to.

The page leads with its approval panel (counts, approvers, wait and expiry); only an approver
sees the buttons; a post by anyone else is refused with 403 and records nothing; the
dashboard lists it while it waits; the timeline shows each decision and the release.
Screenshots of the waiting page at 1440 and 1024 px go to ``var/test/screenshots/``.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

from deployments.models import Approval, Deployment, Environment
from deployments.services import deployment_create
from tests.browser.conftest import PASSWORD
from tests.browser.test_console import shot

VIEW = ("view_deployment", "view_environment")


def person(name: str, *codenames: str, group: Group | None = None):
    user = get_user_model().objects.create_user(name, password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=[*VIEW, *codenames]))
    if group is not None:
        user.groups.add(group)
    return user


def login(page, username: str) -> None:
    page.context.clear_cookies()
    page.goto("/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def forged_post(page, url: str):
    """POST a decision as the page's user would, with a valid CSRF token, but no button."""
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    return page.request.post(url, form={"csrfmiddlewaretoken": token, "approval_comment": "forged"})


def test_approvers_decide_from_the_panel_and_nobody_else_can(admin_page, make_project):
    project = make_project("shop")
    managers = Group.objects.create(name="release-managers")
    managers.permissions.set(Permission.objects.filter(codename="approve_deployment"))
    Environment.objects.create(
        project=project,
        name="production",
        protected=True,
        required_approvals=2,
        approver_users=["alice"],
        approver_groups=["release-managers"],
        wait_timer=30,
    )
    person("alice", "approve_deployment")
    person("bob", group=managers)
    person("carol")  # may look, not decide
    deployment = deployment_create(project=project, ref="v2.0.0", triggered_by="ci-bot")
    assert deployment.status == "waiting_approval"
    page_url = f"/admin/deployments/deployment/{deployment.pk}/change/"
    approve_url = f"/admin/deployments/deployment/{deployment.pk}/approve/"

    # The dashboard lists it, with its age, beside the deployments in flight.
    page = admin_page
    page.goto("/admin/dashboard/")
    row = page.locator(f"#dashboard-approvals tr[data-deployment='{deployment.pk}']")
    assert "shop / production @ v2.0.0" in row.inner_text()
    assert row.locator("[data-waited]").inner_text().strip().endswith(" s")

    # A superuser outside the environment's approvers sees the panel and why, no buttons.
    page.goto(page_url)
    panel = page.locator("#deployment-approval")
    assert "0 of 2 approvals given; 2 more needed" in panel.inner_text()
    approvers = page.locator("#approval-approvers").inner_text()
    assert "users alice" in approvers and "groups release-managers" in approvers
    assert page.locator("#approval-eligible").inner_text().strip().endswith("alice, bob")
    assert "expires" in page.locator("#approval-expires").inner_text()
    assert "30 s" in page.locator("#approval-wait-timer").inner_text()
    # It is at the top: above the summary, and no empty log box below.
    assert page.evaluate(
        "document.querySelector('#deployment-approval').getBoundingClientRect().top"
        " < document.querySelector('#deployment-summary').getBoundingClientRect().top"
    )
    assert page.locator("#deployment-log").count() == 0
    assert "Waiting for approval" in page.locator("#deployment-log-waiting").inner_text()
    assert page.locator("#approval-form").count() == 0
    assert "not an approver" in page.locator("#approval-refusal").inner_text()
    assert forged_post(page, approve_url).status == 403

    login(page, "carol")
    page.goto(page_url)
    assert "0 of 2" in page.locator("#deployment-approval").inner_text()
    assert page.locator("#approval-form, #deployment-approval button").count() == 0
    assert forged_post(page, approve_url).status == 403
    assert not Approval.objects.exists()
    assert Deployment.objects.get(pk=deployment.pk).status == "waiting_approval"

    login(page, "alice")
    # Even an approver's post needs the page's CSRF token.
    no_token = page.request.post(approve_url, form={"approval_comment": "no csrf"})
    assert no_token.status == 403 and "CSRF" in no_token.text()
    assert not Approval.objects.exists()
    page.goto(page_url)
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"deployment-waiting-approval-{width}")
    page.fill("#approval-comment", "looks good, smoke tests green")
    page.click("#approval-form button[name=approve]")
    page.wait_for_selector(".messagelist")
    assert "approved" in page.locator(".messagelist").inner_text()
    assert (
        "1 of 2 approvals given; 1 more needed" in page.locator("#deployment-approval").inner_text()
    )
    decided = page.locator(".approval-decisions li[data-decision=approved]")
    assert "alice" in decided.inner_text() and "looks good" in decided.inner_text()
    assert "already" in page.locator("#approval-refusal").inner_text()

    login(page, "bob")
    page.goto(page_url)
    page.fill("#approval-comment", "ship it")
    page.click("#approval-form button[name=approve]")
    page.wait_for_selector(".messagelist")
    assert Deployment.objects.get(pk=deployment.pk).status == "pending"
    assert page.locator("#deployment-status").inner_text() == "pending"
    assert page.locator("#deployment-approval").count() == 0
    assert page.locator("#deployment-log").count() == 1
    timeline = page.locator("#deployment-timeline")
    approved = timeline.locator("tr[data-kind=approved]")
    assert approved.count() == 2
    assert "approved by alice: looks good, smoke tests green" in approved.nth(0).inner_text()
    assert "approved by bob: ship it" in approved.nth(1).inner_text()
    released = timeline.locator("tr[data-kind=released]")
    assert "released with 2 approvals" in released.inner_text()
    kinds = page.eval_on_selector_all(
        "#deployment-timeline tr[data-kind]", "rows => rows.map(r => r.dataset.kind)"
    )
    assert kinds.index("created") < kinds.index("approved") < kinds.index("released")

    login(page, "admin")
    page.goto("/admin/dashboard/")
    assert page.locator(f"#dashboard-approvals tr[data-deployment='{deployment.pk}']").count() == 0
    assert "Nothing is waiting for approval" in page.locator("#dashboard-approvals").inner_text()


def test_a_rejection_with_a_comment_ends_it_and_shows_in_the_timeline(admin_page, make_project):
    project = make_project("shop")
    Environment.objects.create(
        project=project, name="production", protected=True, required_approvals=1
    )
    deployment = deployment_create(project=project, ref="main", triggered_by="ci-bot")
    page = admin_page
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    assert (
        "any user with the approve permission" in page.locator("#approval-approvers").inner_text()
    )
    page.fill("#approval-comment", "not during the sale")
    page.click("#approval-form button[name=reject]")
    page.wait_for_selector(".messagelist")
    ended = Deployment.objects.get(pk=deployment.pk)
    assert (ended.status, ended.failure_reason) == ("cancelled", "rejected")
    assert page.locator("#deployment-approval").count() == 0
    rejected = page.locator("#deployment-timeline tr[data-kind=rejected]")
    assert "rejected by admin: not during the sale" in rejected.inner_text()


def test_an_unprotected_environment_shows_no_approval_panel(admin_page, make_project):
    deployment = deployment_create(project=make_project("shop"), ref="main", triggered_by="ci")
    page = admin_page
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    page.wait_for_selector("#deployment-status")
    assert page.locator("#deployment-approval").count() == 0
    assert page.locator("#deployment-log").count() == 1
