"""A token's scope cannot exceed what its creator may do: admin scope needs a permission."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from jobs.models import AuditLog
from project.access.models import ApiToken
from project.access.tokens import token_create
from tests.api.conftest import Api

ADD_URL = "/admin/access/apitoken/add/"


def staff(name: str, *codenames: str) -> tuple[Client, object]:
    user = get_user_model().objects.create_user(name, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client, user


def add(client: Client, scope: str):
    return client.post(ADD_URL, {"name": f"made-{scope}", "scope": scope, "expires_at": ""})


def test_the_admin_add_form_refuses_admin_scope_without_the_grant_permission(db):
    client, user = staff("adder", "add_apitoken", "view_apitoken")
    refused = add(client, "admin")
    assert refused.status_code == 200  # the form again, with its error
    assert "access.grant_admin_token" in refused.content.decode()
    assert not ApiToken.objects.filter(scope="admin").exists()

    made = add(client, "deploy")
    assert made.status_code == 302
    token = ApiToken.objects.get(name="made-deploy")
    assert token.scope == "deploy" and token.user == user  # it acts for its creator

    granter, _ = staff("granter", "add_apitoken", "view_apitoken", "grant_admin_token")
    assert add(granter, "admin").status_code == 302
    created = AuditLog.objects.get(action="token.create", details__scope="admin")
    assert created.actor == "granter"


def test_the_change_form_cannot_raise_a_token_to_admin_without_it(db):
    token, raw = token_create(name="ci", scope="deploy")
    client, _ = staff("changer", "change_apitoken", "view_apitoken")
    url = f"/admin/access/apitoken/{token.pk}/change/"
    refused = client.post(url, {"name": "ci", "scope": "admin", "expires_at": ""})
    assert refused.status_code == 200 and "access.grant_admin_token" in refused.content.decode()
    assert ApiToken.objects.get(pk=token.pk).scope == "deploy"
    assert Api(raw).get("/webhooks/endpoints").status_code == 403

    renamed = client.post(url, {"name": "ci-2", "scope": "deploy", "expires_at": ""})
    assert renamed.status_code == 302 and ApiToken.objects.get(pk=token.pk).name == "ci-2"

    superuser = get_user_model().objects.create_superuser("root", password="x-123456")
    root = Client()
    root.force_login(superuser)
    assert root.post(url, {"name": "ci-2", "scope": "admin", "expires_at": ""}).status_code == 302
    assert ApiToken.objects.get(pk=token.pk).scope == "admin"
    change = AuditLog.objects.get(action="token.change", details__scope__to="admin")
    assert change.actor == "root" and change.details["scope"]["from"] == "deploy"
