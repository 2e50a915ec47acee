"""Fuzz the API from its own OpenAPI document: no 5xx, no response outside the schema."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from project.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)


@pytest.fixture
def in_process_requests():
    """Keep the test's connection open across WSGI requests, as Django's test client does."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(make_project, db, in_process_requests):
    from deployments.models import Deployment  # noqa: F401 - a project with a deployment gives real ids
    from deployments.services import deployment_create
    from project.access.tokens import token_create

    make_project("app")
    deployment_create(project="app", ref="main")
    return token_create(name="fuzz", scope="admin")[1]


@pytest.fixture
def make_project(db):
    from deployments.models import Pipeline, Project, Step

    def make(slug):
        project = Project.objects.create(slug=slug)
        Step.objects.create(
            pipeline=Pipeline.objects.create(project=project, name="default"),
            position=1,
            name="hi",
            command="echo hi",
        )
        return project

    return make


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_api_never_fails_and_keeps_its_schema(case, admin_token, purge_broker):
    case.call_and_validate(
        headers={"Authorization": f"Bearer {admin_token}"},
        checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
    )


# Hostile strings the generator rarely produces: each is refused (422), never stored, never 5xx.
HOSTILE_NAMES = ["main\n", "main\r\n", "\nmain", "ma\nin", "main\x00", "main\u2028"]


@pytest.mark.parametrize("value", HOSTILE_NAMES)
@pytest.mark.parametrize("field", ["ref", "environment", "pipeline", "param"])
def test_hostile_names_are_refused_in_every_field(admin_token, value, field):
    from django.test import Client

    from deployments.models import Deployment

    body = {"ref": "main"}
    if field == "param":
        body["params"] = {f"X{value}": "1"}
    else:
        body[field] = value
    before = Deployment.objects.count()
    response = Client().post(
        "/api/v1/projects/app/deployments",
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {admin_token}"},
    )
    assert response.status_code == 422, response.content
    assert set(response.json()["error"]) == {"code", "message", "details"}
    assert Deployment.objects.count() == before
