"""The environments pages in a real browser: every environment, its rules as a form, Rollback.

An environment without rules is listed beside the ruled ones; the rules form has no raw JSON
(approvers are picked, freeze windows are rows), refuses a bad window on the form and saves
a good one that the API then shows; Rollback makes the deployment the API's rollback makes;
a user without the permissions sees no button and a forged POST is refused with 403.
Screenshots at 1440 and 1024 px go to ``var/test/screenshots/``.
"""

from django.contrib.auth.models import Group
from django.db.models import Q

from deployments.models import Deployment, Environment
from deployments.services import deployment_create
from deployments.transitions import transition
from jobs.models import AuditLog
from project.access.models import ApiToken
from project.access.tokens import token_create
from tests.api.conftest import Api
from tests.browser.test_approvals import forged_post, login, person
from tests.browser.test_console import shot

LIST = "/admin/deployments/environment/"
PAGE = LIST + "env/shop/production/"


def succeeded(project, environment: str, ref: str, sha: str) -> Deployment:
    deployment = deployment_create(
        project=project, ref=ref, environment=environment, triggered_by="ci"
    )
    Deployment.objects.filter(pk=deployment.pk).update(commit_sha=sha)
    for state in ("pending", "running", "success"):
        transition(Q(pk=deployment.pk), state)
    return Deployment.objects.get(pk=deployment.pk)


def csrf(page) -> str:
    return next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")


def api(scope: str, *projects) -> Api:
    """A client whose token is bound to ``projects`` (what a CI's token is)."""
    token, raw = token_create(name=f"{scope}-token-{ApiToken.objects.count()}", scope=scope)
    token.projects.set(projects)
    return Api(raw)


def test_every_environment_is_listed_and_its_rules_are_a_form(
    admin_page, make_project, purge_broker
):
    project = make_project("shop")
    Environment.objects.create(project=project, name="production")
    deployment_create(project=project, ref="main", environment="staging", triggered_by="ci")
    Group.objects.create(name="release-managers")
    person("alice")
    person("bob")
    page = admin_page

    page.goto(LIST)
    rows = page.locator("#environments tbody tr")
    assert [r.get_attribute("data-environment") for r in rows.all()] == [
        "shop/production",
        "shop/staging",
    ]
    assert "no rules" in page.locator("tr[data-environment='shop/staging']").inner_text()
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"environments-list-{width}")
    page.click("text=shop / staging")
    assert page.locator("#edit-rules").inner_text() == "add rules"

    page.goto(PAGE)
    page.click("#edit-rules")
    assert page.locator("#rules-form textarea").count() == 0  # no raw JSON anywhere
    assert "apply_projects" in page.locator("#rules-managed-by-code").inner_text()
    page.check("#id_protected")
    page.fill("#id_required_approvals", "2")
    page.select_option("#id_approver_users", ["alice", "bob"])
    page.select_option("#id_approver_groups", ["release-managers"])
    page.fill("#id_refs", "main, release/*")
    page.fill("#id_freeze-0-name", "weekend")
    page.fill("#id_freeze-0-cron", "0 18 * * fri")
    page.fill("#id_freeze-0-duration", "62h")
    page.fill("#id_freeze-0-timezone", "Europe/Paris")
    page.fill("#id_freeze-1-name", "year-end")
    page.fill("#id_freeze-1-start", "2026-12-20 00:00")
    page.fill("#id_freeze-1-end", "2026-12-19 00:00")  # before its start
    page.click("input[name=_save]")
    # Refused on the form, with the row's error; nothing stored.
    assert "Please correct the errors below." in page.locator(".errornote").inner_text()
    assert "end: must be after start" in page.locator("#freeze-windows").inner_text()
    assert Environment.objects.get(name="production").approver_users == []
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"environment-rules-errors-{width}")

    page.fill("#id_freeze-1-end", "2027-01-04 00:00")
    page.click("input[name=_save]")
    page.wait_for_url(f"**{PAGE}")
    assert "Rules of shop / production saved." in page.locator(".messagelist").inner_text()
    shown = api("read", project).get("/projects/shop/environments/production").json()
    assert shown["protected"] is True and shown["required_approvals"] == 2
    assert shown["approvers"] == {"users": ["alice", "bob"], "groups": ["release-managers"]}
    assert shown["freeze"] == [
        {"name": "weekend", "timezone": "Europe/Paris", "cron": "0 18 * * fri", "duration": 223200},
        {
            "name": "year-end",
            "timezone": "UTC",
            "start": "2026-12-20T00:00:00",
            "end": "2027-01-04T00:00:00",
        },
    ]
    assert Environment.objects.get(name="production").refs == ["main", "release/*"]
    freeze = page.locator("#rules-freeze").inner_text()
    assert "weekend: cron 0 18 * * fri for 62h (Europe/Paris)" in freeze
    assert "year-end: 2026-12-20 00:00 to 2027-01-04 00:00 (UTC)" in freeze
    page.set_viewport_size({"width": 1440, "height": 900})
    shot(page, "environment-page-with-rules-1440")
    assert AuditLog.objects.filter(action="environment.rules_changed").count() == 1

    # The form shows what is stored, and saving it unchanged stores the same.
    page.click("#edit-rules")
    assert page.input_value("#id_freeze-0-duration") == "62h"
    assert page.input_value("#id_freeze-1-start") == "2026-12-20 00:00"
    page.check("#id_freeze-0-DELETE")
    page.click("input[name=_save]")
    page.wait_for_url(f"**{PAGE}")
    freeze = api("read", project).get("/projects/shop/environments/production").json()["freeze"]
    assert [w["name"] for w in freeze] == ["year-end"]


def test_rollback_makes_the_deployment_the_api_makes_and_needs_the_permission(
    admin_page, make_project, purge_broker
):
    project = make_project("shop")
    first = succeeded(project, "production", "v1", "a" * 40)
    second = succeeded(project, "production", "v2", "b" * 40)
    page = admin_page

    page.goto(PAGE)
    assert f"#{second.pk}" in page.locator("#current-deployment").inner_text()
    assert page.locator("#environment-history tbody tr").count() == 2
    dora = page.locator("#environment-dora tbody tr").nth(1).inner_text()
    assert dora.split("\t")[:2] == ["30", "2 (0.0667/day)"] and "0% (0/2)" in dora
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"environment-page-{width}")
    key = page.locator("#rollback-form input[name=rollback_key]").input_value()
    page.click("#rollback-button")
    link = page.locator("#rollback-deployment")
    made = Deployment.objects.get(pk=int(link.inner_text().removeprefix("deployment #")))
    assert link.get_attribute("href") == f"/admin/deployments/deployment/{made.pk}/change/"
    assert (made.rollback_of_id, made.undoes_id) == (first.pk, second.pk)
    assert (made.ref, made.commit_sha, made.triggered_by) == ("v1", "a" * 40, "admin")
    assert AuditLog.objects.filter(action="deployment.rollback", actor="admin").count() == 1
    # The same form sent again (a double click, a resubmission) makes no second deployment.
    again = page.request.post(
        PAGE + "rollback/", form={"csrfmiddlewaretoken": csrf(page), "rollback_key": key}
    )
    assert again.ok and Deployment.objects.filter(rollback_of=first).count() == 1

    # The API's rollback, asked now, makes the same deployment (the first is not done yet).
    response = api("deploy", project).post("/projects/shop/environments/production/rollback")
    assert response.status_code == 201, response.content
    by_api = Deployment.objects.get(pk=response.json()["id"])
    fields = ("rollback_of_id", "undoes_id", "ref", "commit_sha", "pipeline_name", "status")
    assert [getattr(by_api, f) for f in fields] == [getattr(made, f) for f in fields]
    assert response.json()["rollback_of"] == first.pk

    # Nothing to go back to: the error is said on the page, no deployment is made.
    other = make_project("lonely")
    succeeded(other, "production", "v1", "c" * 40)
    page.goto(LIST + "env/lonely/production/")
    page.click("#rollback-button")
    assert "Rollback refused" in page.locator(".messagelist .error").inner_text()
    assert Deployment.objects.filter(project=other).count() == 1

    # A viewer sees the page, no Rollback and no rules link; forged posts are refused.
    person("viewer")
    login(page, "viewer")
    page.goto(PAGE)
    assert page.locator("#current-deployment").count() == 1
    assert page.locator("#rollback-button").count() == 0
    assert page.locator("#edit-rules").count() == 0
    before = Deployment.objects.count()
    assert forged_post(page, PAGE + "rollback/").status == 403
    assert forged_post(page, PAGE + "rules/").status == 403
    assert Deployment.objects.count() == before
    # And a post without the CSRF token is refused even for the admin.
    login(page, "admin")
    assert page.request.post(PAGE + "rollback/").status == 403
    assert Deployment.objects.count() == before
