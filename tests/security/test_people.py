"""Approvals are bound to people: who a token acts for, who triggered, who may approve."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client

from deployments.models import Deployment, Environment
from deployments.services import deployment_cancel, deployment_create
from jobs.models import AuditLog
from project.access.models import ApiToken
from project.access.tokens import token_create
from tests.api.conftest import Api, assert_error
from tests.deployments.conftest import wait_for

pytestmark = pytest.mark.usefixtures("purge_broker")


def person(name: str, *perms: str, active: bool = True):
    user = get_user_model().objects.create_user(name, is_staff=True, is_active=active)
    for perm in perms:
        user.user_permissions.add(Permission.objects.get(codename=perm))
    return user


def token_of(user, scope: str = "admin", name: str = "") -> Api:
    token, raw = token_create(name=name or f"{user.username}-{scope}", scope=scope, user=user)
    api = Api(raw)
    api.token = token
    return api


@pytest.fixture
def shop(make_project):
    project = make_project("shop", pipelines={"default": [{"name": "go", "command": "echo go"}]})
    Environment.objects.create(
        project=project, name="production", protected=True, required_approvals=1
    )
    return project


def _bind(api: Api, project) -> Api:
    project.api_tokens.add(api.token)
    return api


def test_self_approval_is_refused_by_person_with_another_token_and_in_the_console(shop):
    alice = person("alice", "approve_deployment", "run_deployment")
    deploy = _bind(token_of(alice, "deploy"), shop)
    created = deploy.post("/projects/shop/deployments", {"ref": "main"})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["status"] == "waiting_approval"
    assert body["triggered_by_user"] == "alice"
    assert body["triggered_by"] == "alice via token:alice-deploy"

    # Her admin token (another name) and a second admin token are still alice.
    for api in (token_of(alice), token_of(alice, name="second")):
        refused = assert_error(api.post(f"/deployments/{body['id']}/approve"), 403, "forbidden")
        assert "cannot approve" in refused["message"]
    console = Client()
    console.force_login(alice)
    console.post(f"/admin/deployments/deployment/{body['id']}/approve/")
    assert Deployment.objects.get(pk=body["id"]).status == "waiting_approval"
    assert not Deployment.objects.get(pk=body["id"]).approvals.exists()


def test_only_an_active_person_with_the_permission_approves_where_nobody_is_listed(shop):
    requester = _bind(
        token_of(person("erin", "approve_deployment", "run_deployment"), "deploy"), shop
    )

    def waiting() -> int:
        return requester.post("/projects/shop/deployments", {"ref": "main"}).json()["id"]

    _, nobody = token_create(name="ops", scope="admin")  # made by the command: no person
    without = token_of(person("bob"))  # staff, but no approve_deployment
    leaver = person("dave", "approve_deployment")
    leaving = token_of(leaver)
    approver = token_of(person("carol", "approve_deployment"))

    first = waiting()
    refused = assert_error(Api(nobody).post(f"/deployments/{first}/approve"), 403, "forbidden")
    assert "no person" in refused["message"]
    refused = assert_error(without.post(f"/deployments/{first}/approve"), 403, "forbidden")
    assert "approve_deployment" in refused["message"]
    leaver.is_active = False
    leaver.save()
    assert_error(leaving.post(f"/deployments/{first}/approve"), 401, "unauthorized")
    assert_error(leaving.get("/queue"), 401, "unauthorized")  # everywhere, not only approving
    assert Api(nobody).get("/queue").status_code == 200  # a token of nobody still works
    approved = approver.post(f"/deployments/{first}/approve", {"comment": "ok"})
    assert approved.status_code == 200 and approved.json()["status"] == "pending"

    # The audit log and the timeline name the person and the token.
    audit = AuditLog.objects.get(action="deployment.approved", target_id=str(first))
    assert audit.actor == "carol via token:carol-admin"
    events = approver.get(f"/deployments/{first}/timeline").json()["events"]
    assert events[0]["kind"] == "created" and events[0]["user"] == "erin"
    assert "erin via token:erin-deploy" in events[0]["summary"]
    approval = next(e for e in events if e["kind"] == "approved")
    assert approval["actor"] == "carol via token:carol-admin"


def test_retry_and_rollback_record_their_person(make_project, deploy_worker):
    project = make_project("web")
    ops = person("olga", "run_deployment")
    api = _bind(token_of(ops, "deploy"), project)
    deploy_worker()

    first = api.post("/projects/web/deployments", {"ref": "main"}).json()["id"]
    wait_for(first, "success")
    second = api.post("/projects/web/deployments", {"ref": "main"}).json()["id"]
    wait_for(second, "success")
    retried = api.post(f"/deployments/{first}/retry")
    assert retried.status_code == 201 and retried.json()["triggered_by_user"] == "olga"
    rolled = api.post("/projects/web/environments/production/rollback", {"deployment_id": first})
    assert rolled.status_code == 201, rolled.content
    assert rolled.json()["triggered_by_user"] == "olga"
    people = Deployment.objects.values_list("triggered_by_user__username", flat=True)
    assert set(people) == {"olga"}


def test_create_api_token_binds_a_person_and_refuses_what_it_cannot_do(make_project, capsys):
    make_project("app")
    alice = person("alice")
    person("gone", active=False)
    call_command("create_api_token", "--user", "alice", "--name", "mine")
    assert ApiToken.objects.get(name="mine").user == alice
    for user in ("nobody", "gone"):
        with pytest.raises(CommandError) as refused:
            call_command("create_api_token", "--user", user)
        assert refused.value.returncode == 2 and "\n" not in str(refused.value)
        assert user in str(refused.value)
    # An admin token reaches every project: it is never made "bound" to one.
    with pytest.raises(CommandError) as refused:
        call_command("create_api_token", "--project", "app", "--scope", "admin")
    assert refused.value.returncode == 2 and "every project" in str(refused.value)
    assert ApiToken.objects.count() == 1


def test_a_persons_token_does_no_more_than_the_person_may(shop):
    """Scope says what a token may ask; a token of a person also needs that person's right."""
    mallory = person("mallory")  # staff, no permission at all
    deploy = _bind(token_of(mallory, "deploy"), shop)
    admin = token_of(mallory, "admin", name="mallory-admin")
    refused = assert_error(deploy.post("/projects/shop/deployments", {"ref": "main"}), 403)
    assert "deployments.run_deployment" in refused["message"]
    created = deployment_create(project=shop, ref="main", environment="staging")
    deployment_cancel(deployment_id=created.pk, actor="test")
    assert_error(deploy.post(f"/deployments/{created.pk}/retry"), 403, "forbidden")
    running = deployment_create(project=shop, ref="main", environment="qa")
    assert_error(deploy.post(f"/deployments/{running.pk}/cancel"), 403, "forbidden")
    rollback = deploy.post("/projects/shop/environments/production/rollback")
    assert_error(rollback, 403, "forbidden")
    assert_error(admin.get("/jobs"), 403, "forbidden")
    assert_error(admin.post("/queues/default/pause"), 403, "forbidden")
    assert_error(admin.get("/webhooks/endpoints"), 403, "forbidden")
    assert Deployment.objects.filter(project=shop).count() == 2  # nothing was made

    mallory.user_permissions.add(
        *Permission.objects.filter(codename__in=["run_deployment", "view_job", "view_endpoint"])
    )
    mallory = get_user_model().objects.get(pk=mallory.pk)  # a fresh permission cache
    assert deploy.post("/projects/shop/deployments", {"ref": "main"}).status_code == 201
    assert admin.get("/jobs").status_code == 200
    assert admin.get("/webhooks/endpoints").status_code == 200
    assert_error(admin.post("/queues/default/pause"), 403, "forbidden")  # still not that
