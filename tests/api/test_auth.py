"""Authentication and scopes: no token, bad token, revoked, expired, too small a scope."""

from datetime import timedelta

import pytest
from django.utils import timezone

from project.access.models import ApiToken
from project.access.tokens import token_create, token_revoke
from tests.api.conftest import Api, assert_error


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header", [None, "Bearer nope", "Bearer cvy_unknown", "Basic abc", "Bearer "]
)
def test_missing_or_bad_tokens_get_401(header):
    api = Api(None)
    if header:
        api.headers = {"Authorization": header}
    assert_error(api.get("/queue"), 401, "unauthorized")


@pytest.mark.django_db
def test_the_token_is_stored_only_as_a_hash():
    token, raw = token_create(name="ci", scope="deploy")
    stored = ApiToken.objects.get(pk=token.pk)
    assert raw not in (stored.token_hash, stored.prefix) and raw.startswith(stored.prefix)
    assert len(stored.token_hash) == 64


@pytest.mark.django_db
def test_revoked_and_expired_tokens_get_401():
    token, raw = token_create(name="old", scope="admin")
    assert Api(raw).get("/queue").status_code == 200
    token_revoke(token, actor="test")
    assert_error(Api(raw).get("/queue"), 401)
    _, expired = token_create(
        name="exp", scope="admin", expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert_error(Api(expired).get("/queue"), 401)
    _, fresh = token_create(
        name="fresh", scope="admin", expires_at=timezone.now() + timedelta(hours=1)
    )
    assert Api(fresh).get("/queue").status_code == 200


@pytest.mark.django_db
def test_last_used_is_recorded():
    token, raw = token_create(name="ci", scope="read")
    Api(raw).get("/queue")
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.django_db
@pytest.mark.parametrize("scope", ["read", "deploy"])
def test_jobs_need_the_admin_scope(make_api, scope):
    api = make_api(scope)
    assert_error(api.get("/jobs"), 403, "forbidden")
    assert_error(api.get("/jobs/1"), 403, "forbidden")
    assert_error(api.post("/jobs/1/retry"), 403, "forbidden")
    assert api.get("/queue").status_code == 200
