import json

import pytest
from django.test import Client

from project.access.tokens import token_create


class Api:
    """A Django test client that speaks JSON with a bearer token."""

    def __init__(self, raw_token: str | None) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {raw_token}"} if raw_token else {}

    def get(self, path, **params):
        return self.client.get(f"/api/v1{path}", params, headers=self.headers)

    def post(self, path, body=None, *, headers=None, raw: bytes | None = None):
        data = raw if raw is not None else (b"" if body is None else json.dumps(body))
        return self.client.post(
            f"/api/v1{path}",
            data,
            content_type="application/json",
            headers={**self.headers, **(headers or {})},
        )

    def delete(self, path):
        return self.client.delete(f"/api/v1{path}", headers=self.headers)

    def patch(self, path, body):
        return self.client.patch(
            f"/api/v1{path}",
            json.dumps(body),
            content_type="application/json",
            headers=self.headers,
        )


@pytest.fixture
def make_api(db):
    def make(scope: str = "admin", **kwargs) -> Api:
        _, raw = token_create(name=f"{scope}-token", scope=scope, **kwargs)
        return Api(raw)

    return make


def assert_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if code:
        assert body["error"]["code"] == code, body
    return body["error"]


@pytest.fixture
def project_api(make_project):
    """``make(scope, *projects)``: a client whose token is bound to those projects."""

    def make(scope: str, *projects) -> Api:
        token, raw = token_create(name=f"{scope}-bound", scope=scope)
        for project in projects:
            project.api_tokens.add(token)
        return Api(raw)

    return make
