"""Admin: Approve/Reject on the deployment page (permission-checked, audited), environment pages."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q

from deployments import timeline
from deployments.models import Deployment, Environment
from deployments.services import deployment_create
from deployments.transitions import transition
from jobs.models import AuditLog


@pytest.fixture
def shop(make_project):
    project = make_project("shop")
    Environment.objects.create(
        project=project, name="production", protected=True, required_approvals=1
    )
    return project


def staff(client, name: str, *, approver: bool):
    user = get_user_model().objects.create_user(name, password="pw-123456", is_staff=True)
    codenames = ["view_deployment", "view_environment"]
    if approver:
        codenames.append("approve_deployment")
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


def test_the_approve_button_needs_the_permission_and_is_audited(client, shop):
    deployment = deployment_create(project=shop, ref="main", triggered_by="ci")
    page = f"/admin/deployments/deployment/{deployment.pk}/"
    viewer = staff(client, "viewer", approver=False)
    assert viewer.get(f"{page}change/").status_code == 200
    assert viewer.post(f"{page}approve/").status_code == 403
    assert Deployment.objects.get(pk=deployment.pk).status == "waiting_approval"

    approver = staff(client, "approver", approver=True)
    body = approver.get(f"{page}change/").content.decode()
    assert f"{page}approve/" in body and f"{page}reject/" in body
    assert approver.get(f"{page}approve/").status_code == 405  # only a POST decides
    response = approver.post(f"{page}approve/", {"approval_comment": "ok"}, follow=True)
    assert response.status_code == 200 and "approved" in response.content.decode()
    approved = Deployment.objects.get(pk=deployment.pk)
    assert approved.status == "pending" and approved.job_id is not None
    audit = AuditLog.objects.get(action="deployment.approved")
    assert (audit.actor, audit.details) == ("approver", {"comment": "ok"})
    # Finished or started: no buttons any more, and a second decision is refused politely.
    assert f"{page}approve/" not in approver.get(f"{page}change/").content.decode()
    refused = approver.post(f"{page}reject/", follow=True)
    assert "Refused" in refused.content.decode()


def test_the_list_actions_are_offered_only_to_approvers(client, shop):
    first = deployment_create(project=shop, ref="main", triggered_by="ci")
    second = deployment_create(project=shop, ref="main", triggered_by="ci")
    viewer = staff(client, "viewer", approver=False)
    assert "reject_deployments" not in viewer.get("/admin/deployments/deployment/").content.decode()
    approver = staff(client, "approver", approver=True)
    assert "reject_deployments" in approver.get("/admin/deployments/deployment/").content.decode()
    approver.post(
        "/admin/deployments/deployment/",
        {"action": "reject_deployments", "_selected_action": [first.pk, second.pk]},
    )
    reasons = set(Deployment.objects.values_list("status", "failure_reason"))
    assert reasons == {("cancelled", "rejected")}


def test_the_environment_page_shows_history_and_the_dora_table(admin_client, shop):
    deployment = deployment_create(project=shop, ref="v1.2.3", triggered_by="ci")
    transition(Q(pk=deployment.pk), "pending")
    transition(Q(pk=deployment.pk), "running")
    transition(Q(pk=deployment.pk), "success")
    environment = Environment.objects.get(project=shop)
    listing = admin_client.get("/admin/deployments/environment/")
    assert listing.status_code == 200 and f"#{deployment.pk}" in listing.content.decode()
    # A rules row's change page is its environment's page (never the raw JSON fields).
    page = admin_client.get(f"/admin/deployments/environment/{environment.pk}/change/", follow=True)
    assert page.redirect_chain[-1][0] == "/admin/deployments/environment/env/shop/production/"
    body = page.content.decode()
    assert page.status_code == 200 and "v1.2.3" in body
    assert "change failure rate" in body and "1 (0.0333/day)" in body  # 1 in 30 days


def test_a_permitted_user_outside_the_approvers_sees_why_and_is_refused_with_403(client, shop):
    Environment.objects.filter(project=shop).update(approver_users=["alice"])
    deployment = deployment_create(project=shop, ref="main", triggered_by="ci")
    page = f"/admin/deployments/deployment/{deployment.pk}/"
    outsider = staff(client, "outsider", approver=True)
    body = outsider.get(f"{page}change/").content.decode()
    assert 'id="deployment-approval"' in body and "users alice" in body
    assert 'id="approval-form"' not in body and "is not an approver" in body
    assert outsider.post(f"{page}approve/", {"approval_comment": "me"}).status_code == 403
    assert outsider.post(f"{page}reject/").status_code == 403
    assert Deployment.objects.get(pk=deployment.pk).status == "waiting_approval"
    assert not AuditLog.objects.filter(action__startswith="deployment.approv").exists()


def test_the_timeline_shows_each_decision_with_its_comment_and_the_release(client, shop):
    Environment.objects.filter(project=shop).update(required_approvals=2)
    deployment = deployment_create(project=shop, ref="main", triggered_by="ci")
    for name, comment in (("alice", "fine"), ("bob", "")):
        staff(client, name, approver=True).post(
            f"/admin/deployments/deployment/{deployment.pk}/approve/",
            {"approval_comment": comment},
        )
    events = timeline.deployment_timeline(Deployment.objects.get(pk=deployment.pk))
    decided = [
        (e["kind"], e["summary"], e.get("comment"))
        for e in events
        if e["kind"] in ("approved", "released")
    ]
    assert decided == [
        ("approved", "approved by alice: fine", "fine"),
        ("approved", "approved by bob", None),
        ("released", "released with 2 approvals: pending", None),
    ]
    released = next(e for e in events if e["kind"] == "released")
    assert (released["approvals"], released["required"]) == (2, 2)


def test_an_unprotected_deployment_page_has_no_approval_panel(admin_client, make_project):
    deployment = deployment_create(project=make_project("open"), ref="main", triggered_by="ci")
    body = admin_client.get(f"/admin/deployments/deployment/{deployment.pk}/change/")
    assert body.status_code == 200
    assert 'id="deployment-approval"' not in body.content.decode()
    assert 'id="deployment-log"' in body.content.decode()
