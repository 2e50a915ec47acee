"""API tokens moved from the job engine to project.access (access.0001) without losing a row.

A database migrated as far as the engine's last migration before the move (jobs.0017, with
tokens under ``jobs``) gets a token, an idempotency key and a group and a user holding the
token permissions; migrated forward, the token still authenticates, the key is still its,
and the group and the user hold the same permissions, now named ``access.*``. On the
embedded default (SQLite) and on PostgreSQL.
"""

import json

import psycopg
import pytest
from django.conf import settings

from tests.foundation.test_embedded import embedded_env, manage

# Every app as it stood just before the move (the rest of the migrations are the move).
BEFORE_THE_MOVE = [
    ("auth",),
    ("jobs", "0017_job_payload_path_index"),
    ("deployments", "0009_people_and_canonical_environments"),
    ("webhooks",),
]

# The tables are the same before and after the move: today's models write yesterday's rows.
SEED = """
import json
from django.contrib.auth.models import Group, Permission, User
from project.access.models import IdempotencyKey
from project.access.tokens import token_create
token, raw = token_create(name="ci", scope="admin")
IdempotencyKey.objects.create(token=token, key="k1", path="/p", fingerprint="f", status_code=201)
perms = Permission.objects.filter(
    content_type__app_label="jobs", content_type__model__in=["apitoken", "idempotencykey"]
)
group = Group.objects.create(name="token-admins")
group.permissions.set(perms)
user = User.objects.create_user("ops", is_staff=True)
user.user_permissions.add(perms.get(codename="grant_admin_token"))
print(json.dumps({"raw": raw, "codenames": sorted(p.codename for p in perms)}))
"""

CHECK = """
import json
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from project.access.models import IdempotencyKey
from project.access.tokens import token_authenticate
token = token_authenticate(RAW)
group = Group.objects.get(name="token-admins")
print(json.dumps({
    "token": token and token.name,
    "key_of_token": IdempotencyKey.objects.get(key="k1").token_id == (token and token.pk),
    "group": sorted(f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()),
    "user": sorted(User.objects.get(username="ops").get_all_permissions()),
    "left_under_jobs": ContentType.objects.filter(
        app_label="jobs", model__in=["apitoken", "idempotencykey"]
    ).count(),
    "grant_rows": Permission.objects.filter(codename="grant_admin_token").count(),
}))
"""


@pytest.fixture
def postgres_url():
    """A database of its own on the test server, dropped afterwards."""
    server = settings.DATABASES["default"]
    name = f"{server['NAME']}_access_move"
    admin_url = (
        f"postgresql://{server['USER']}:{server['PASSWORD']}@{server['HOST']}:{server['PORT']}"
        "/postgres"
    )
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _last_json(out) -> dict:
    return json.loads(out.stdout.strip().splitlines()[-1])


def _move_keeps_tokens_and_permissions(env: dict) -> None:
    for target in BEFORE_THE_MOVE:
        manage(env, "migrate", "--noinput", *target, timeout=300)
    plan = manage(env, "migrate", "--plan").stdout
    assert (
        "access.0001_initial" in plan and "jobs.0020_api_tokens_move_to_access" in plan
    )  # the move is still to come
    seeded = _last_json(manage(env, "shell", "-c", SEED))
    assert {"add_apitoken", "view_apitoken", "grant_admin_token", "revoke_apitoken"} <= set(
        seeded["codenames"]
    )

    manage(env, "migrate", "--noinput", timeout=300)
    manage(env, "makemigrations", "--check", "--dry-run")
    after = _last_json(manage(env, "shell", "-c", f"RAW = {seeded['raw']!r}\n{CHECK}"))

    assert after["token"] == "ci"
    assert after["key_of_token"] is True
    assert after["group"] == sorted(f"access.{codename}" for codename in seeded["codenames"])
    assert after["user"] == ["access.grant_admin_token"]  # held directly, not through a group
    assert after["left_under_jobs"] == 0
    assert after["grant_rows"] == 1  # moved, not made again beside the old one


def test_the_move_keeps_tokens_and_permissions_on_the_embedded_default(tmp_path):
    _move_keeps_tokens_and_permissions(embedded_env(tmp_path))


def test_the_move_keeps_tokens_and_permissions_on_postgresql(tmp_path, postgres_url):
    _move_keeps_tokens_and_permissions({**embedded_env(tmp_path), "DATABASE_URL": postgres_url})
