"""Deploy locks: a locked environment refuses every new deployment, says who and why, and
is released by whoever took it or an admin — through the API and the admin, audited."""

import re
import time

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from deployments.models import DeployLock, Deployment, Environment
from deployments.services import deployment_cancel, deployment_create
from jobs.models import AuditLog
from project.access.tokens import token_create
from tests.api.conftest import Api, assert_error
from tests.security.test_people import person, token_of

pytestmark = pytest.mark.usefixtures("purge_broker")
LOCK = "/projects/shop/environments/production/lock"


def bound_token(project, name: str, scope: str = "deploy") -> Api:
    token, raw = token_create(name=name, scope=scope)
    project.api_tokens.add(token)
    return Api(raw)


@pytest.fixture
def shop(make_project):
    return make_project("shop", pipelines={"default": [{"name": "go", "command": "echo go"}]})


def test_a_locked_environment_refuses_trigger_retry_and_rollback_naming_who_and_why(
    shop, project_api
):
    ci = project_api("deploy", shop)
    earlier = deployment_create(project=shop, ref="main")
    deployment_cancel(deployment_id=earlier.pk, actor="test")

    locked = ci.post(LOCK, {"reason": "database migration in progress", "expires_in": "2h"})
    assert locked.status_code == 200, locked.content
    body = locked.json()
    assert body["locked_by"] == "token:deploy-bound" and body["environment"] == "production"
    assert body["reason"] == "database migration in progress" and body["expires_at"]

    refused = assert_error(
        ci.post("/projects/shop/deployments", {"ref": "main"}), 409, "environment_locked"
    )
    assert "token:deploy-bound" in refused["message"]
    assert "database migration in progress" in refused["message"]
    assert refused["details"]["reason"] == "database migration in progress"
    assert refused["details"]["locked_by"] == "token:deploy-bound"
    # moments written as everywhere else in the API: UTC, milliseconds, Z
    assert refused["details"]["expires_at"] == body["expires_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", refused["details"]["locked_at"])
    assert_error(ci.post(f"/deployments/{earlier.pk}/retry"), 409, "environment_locked")
    assert_error(
        ci.post("/projects/shop/environments/production/rollback"), 409, "environment_locked"
    )
    assert Deployment.objects.filter(project=shop).count() == 1  # nothing half-written

    # Another environment of the project is not held.
    staged = ci.post("/projects/shop/deployments", {"ref": "main", "environment": "staging"})
    assert staged.status_code == 201
    env = ci.get("/projects/shop/environments/production").json()
    assert env["lock"]["reason"] == "database migration in progress"
    assert ci.get("/projects/shop/environments/staging").json()["lock"] is None

    released = ci.delete(LOCK)
    assert released.status_code == 200 and released.json()["reason"].startswith("database")
    assert ci.post("/projects/shop/deployments", {"ref": "main"}).status_code == 201
    assert ci.get("/projects/shop/environments/production").json()["lock"] is None
    actions = list(
        AuditLog.objects.filter(target_type="environment")
        .order_by("pk")
        .values_list("action", "actor")
    )
    assert actions == [
        ("environment.lock", "token:deploy-bound"),
        ("environment.unlock", "token:deploy-bound"),
    ]


def test_only_the_holder_or_an_admin_releases_and_others_cannot_take_it(shop, project_api):
    holder = project_api("deploy", shop)
    other = bound_token(shop, "other-ci")
    namesake = bound_token(shop, "deploy-bound")  # the holder's name, another token
    assert holder.post(LOCK, {"reason": "incident 42"}).status_code == 200

    taken = assert_error(other.post(LOCK, {"reason": "mine now"}), 409, "environment_locked")
    assert "incident 42" in taken["message"]
    assert_error(other.delete(LOCK), 403, "forbidden")
    # A lock belongs to the token that took it, not to its name (names repeat, and change).
    assert_error(namesake.post(LOCK, {"reason": "mine"}), 409, "environment_locked")
    assert_error(namesake.delete(LOCK), 403, "forbidden")
    assert DeployLock.objects.get().reason == "incident 42"

    # The holder may take it again: a new reason and expiry, audited as a replacement.
    again = holder.post(LOCK, {"reason": "incident 42, still", "expires_in": 600})
    assert again.status_code == 200 and again.json()["expires_at"] is not None
    replaced = AuditLog.objects.filter(action="environment.lock").order_by("pk").last()
    assert replaced.details["replaced"]["reason"] == "incident 42"

    admin = project_api("admin", shop)
    assert admin.delete(LOCK).status_code == 200
    assert_error(admin.delete(LOCK), 404, "not_found")
    assert not DeployLock.objects.exists()


def test_an_expired_lock_no_longer_holds_and_is_replaced(shop, project_api):
    ci = project_api("deploy", shop)
    assert ci.post(LOCK, {"reason": "short", "expires_in": "1s"}).status_code == 200
    assert_error(ci.post("/projects/shop/deployments", {"ref": "main"}), 409, "environment_locked")
    time.sleep(1.2)
    assert ci.post("/projects/shop/deployments", {"ref": "main"}).status_code == 201
    assert ci.get("/projects/shop/environments/production").json()["lock"] is None
    # Anyone may now take it: the expired row is replaced.
    someone = bound_token(shop, "someone-else")
    assert someone.post(LOCK, {"reason": "next"}).json()["locked_by"] == "token:someone-else"
    assert DeployLock.objects.count() == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "reason"),
        ({"reason": ""}, "reason"),
        ({"reason": "   "}, "reason"),
        ({"reason": "x" * 501}, "reason"),
        ({"reason": "ok", "expires_in": "soon"}, "expires_in"),
        ({"reason": "ok", "expires_in": 0}, "expires_in"),
        ({"reason": "ok", "expires_in": -5}, "expires_in"),
        ({"reason": "ok", "expires_in": "100d"}, "expires_in"),
        ({"reason": "ok", "expires_in": True}, "expires_in"),
        ({"reason": "ok", "expires_in": 1.5}, "expires_in"),
        ({"reason": "ok", "until": "tomorrow"}, "until"),
    ],
)
def test_bad_lock_requests_get_the_one_error_shape_and_write_nothing(
    shop, project_api, body, field
):
    ci = project_api("deploy", shop)
    error = assert_error(ci.post(LOCK, body), 422, "invalid")
    assert field in error["message"], error
    assert not DeployLock.objects.exists()
    assert not AuditLog.objects.filter(target_type="environment").exists()


def test_scope_permission_project_and_name_checks(shop, project_api, make_project):
    assert_error(project_api("read", shop).post(LOCK, {"reason": "x"}), 403, "forbidden")
    ci = project_api("deploy", shop)
    assert_error(ci.post("/projects/nope/environments/production/lock", {"reason": "x"}), 404)
    assert_error(ci.post("/projects/shop/environments/bad%20name/lock", {"reason": "x"}), 422)
    assert_error(ci.delete(LOCK), 404, "not_found")
    # A project that declares its environments refuses to lock an undeclared one.
    make_project("strict", strict_environments=True)
    strict = project_api(
        "deploy", *[__import__("deployments").models.Project.objects.get(slug="strict")]
    )
    assert_error(strict.post("/projects/strict/environments/qa/lock", {"reason": "x"}), 422)
    assert not DeployLock.objects.exists()


def test_a_person_needs_the_permission_and_a_lock_shows_on_the_deployment_page(shop):
    alice = person("alice")
    api = token_of(alice, scope="deploy")
    shop.api_tokens.add(api.token)
    assert_error(api.post(LOCK, {"reason": "x"}), 403, "forbidden")

    deployment = deployment_create(project=shop, ref="main")
    bob = person("bob", "add_deploylock", "view_deployment")
    bobs = token_of(bob, scope="deploy")
    shop.api_tokens.add(bobs.token)
    assert (
        bobs.post(LOCK, {"reason": "bob's freeze"}).json()["locked_by"]
        == "bob via token:bob-deploy"
    )
    # Alice, even with admin scope but without the delete permission, cannot release it.
    alice_admin = token_of(alice, scope="admin", name="alice-admin")
    shop.api_tokens.add(alice_admin.token)
    assert_error(alice_admin.delete(LOCK), 403, "forbidden")

    # The console: a deployment page of that environment shows the lock.
    browser = Client()
    browser.force_login(bob)
    page = browser.get(f"/admin/deployments/deployment/{deployment.pk}/change/")
    assert page.status_code == 200
    assert b"bob via token:bob-deploy" in page.content and b"bob&#x27;s freeze" in page.content
    # ... and so do the environment's page and the environments list.
    bob.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_environment", "run_deployment"])
    )
    now = timezone.now()  # a success to roll back from, so only the lock holds the button back
    Deployment.objects.filter(pk=deployment.pk).update(
        status="success", started_at=now, finished_at=now
    )
    browser.force_login(bob)
    env_page = browser.get("/admin/deployments/environment/env/shop/production/").content.decode()
    assert 'id="environment-lock"' in env_page and "bob&#x27;s freeze" in env_page
    assert 'id="rollback-button"' not in env_page and 'id="rollback-locked"' in env_page
    overview = browser.get("/admin/deployments/environment/").content.decode()
    assert "locked by bob via token:bob-deploy" in overview


def test_the_admin_takes_and_releases_a_lock_through_the_service(shop):
    staff = person("ops", "add_deploylock", "view_deploylock", "delete_deploylock")
    browser = Client()
    browser.force_login(staff)
    added = browser.post(
        "/admin/deployments/deploylock/add/",
        {"project": shop.pk, "environment": "Production", "reason": "load", "expires_in": "soon"},
    )
    assert added.status_code == 200 and b"is not a duration" in added.content
    assert not DeployLock.objects.exists()
    added = browser.post(
        "/admin/deployments/deploylock/add/",
        {
            "project": shop.pk,
            "environment": "Production",
            "reason": "load test",
            "expires_in": "2h",
        },
    )
    assert added.status_code == 302, added.content
    lock = DeployLock.objects.get()
    assert (lock.environment, lock.locked_by, lock.locked_by_user) == ("production", "ops", staff)
    assert 7190 < (lock.expires_at - lock.locked_at).total_seconds() <= 7200
    shown = browser.get(f"/admin/deployments/deploylock/{lock.pk}/change/")
    assert shown.status_code == 200 and b"load test" in shown.content
    assert f"/admin/deployments/deploylock/{lock.pk}/delete/".encode() in shown.content
    with pytest.raises(Exception, match="locked by ops"):
        deployment_create(project=shop, ref="main")

    # Someone else may not take it from the admin either; the form says why.
    viewer = person("viewer", "add_deploylock", "view_deploylock")
    other = Client()
    other.force_login(viewer)
    refused = other.post(
        "/admin/deployments/deploylock/add/",
        {"project": shop.pk, "environment": "production", "reason": "mine"},
    )
    assert refused.status_code == 200 and b"locked by ops" in refused.content
    # ... nor release it (no delete permission, not the holder).
    assert (
        other.post(f"/admin/deployments/deploylock/{lock.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )

    assert (
        browser.post(
            f"/admin/deployments/deploylock/{lock.pk}/delete/", {"post": "yes"}
        ).status_code
        == 302
    )
    assert not DeployLock.objects.exists()
    audited = AuditLog.objects.filter(target_type="environment").order_by("pk")
    assert list(audited.values_list("action", "actor")) == [
        ("environment.lock", "ops"),
        ("environment.unlock", "ops"),
    ]
    assert Environment.objects.count() == 0  # a lock needs no rules row


def test_a_project_holds_a_bounded_number_of_locks(shop, project_api, monkeypatch):
    monkeypatch.setattr("deployments.deploy_locks.MAX_LOCKS_PER_PROJECT", 3)
    ci = project_api("deploy", shop)
    for n in range(3):
        assert ci.post(f"/projects/shop/environments/e{n}/lock", {"reason": "x"}).status_code == 200
    refused = assert_error(ci.post("/projects/shop/environments/e3/lock", {"reason": "x"}), 422)
    assert "release one first" in refused["message"]
    # Taking one already held again is not a new lock.
    assert ci.post("/projects/shop/environments/e0/lock", {"reason": "y"}).status_code == 200
    assert DeployLock.objects.count() == 3
