"""Every name, ref, slug and environment is matched whole: a trailing newline is refused.

``$`` also matches before a final ``\\n``, so ``^name$`` accepted ``"production\\n"``, which
ran beside ``production`` (another environment lock) and gave steps a variable whose name
ended in a newline.
"""

import pytest
from django.core.exceptions import ValidationError

from deployments.errors import InvalidRequest
from deployments.models import Deployment, Project
from deployments.projects_as_code.schema import InvalidDocument, parse
from deployments.runner.process_env import step_process_env
from deployments.services import deployment_create
from tests.api.conftest import assert_error


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"ref": "main\n"}, "ref"),
        ({"ref": "main", "environment": "production\n"}, "environment"),
        ({"ref": "main", "params": {"X\n": "1"}}, "params.X\n"),
    ],
)
def test_the_service_refuses_a_trailing_newline(make_project, fields, field):
    project = make_project()
    with pytest.raises(InvalidRequest) as raised:
        deployment_create(project=project, **fields)
    assert raised.value.field == field
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"ref": "main\n"},
        {"ref": "main", "environment": "production\n"},
        {"ref": "main", "params": {"X\n": "1"}},
        {"ref": "main", "pipeline": "default\n"},
    ],
)
def test_the_api_answers_422_to_a_trailing_newline(make_project, project_api, body):
    project = make_project()
    api = project_api("deploy", project)
    assert_error(api.post(f"/projects/{project.slug}/deployments", body), 422, None)
    assert not Deployment.objects.exists()


def _document(**project) -> dict:
    return {"projects": [{"slug": "web", **project}]}


@pytest.mark.parametrize(
    ("document", "key"),
    [
        ({"projects": [{"slug": "web\n"}]}, ".slug"),
        (_document(default_environment="production\n"), "default_environment"),
        (_document(default_pipeline="default\n"), "default_pipeline"),
        (_document(env={"LEVEL\n": "1"}), "env.LEVEL\n"),
        (_document(secrets={"TOKEN\n": "s3cret"}), "secrets.TOKEN\n"),
        (
            _document(pipelines=[{"name": "default\n", "steps": [{"name": "a", "command": "x"}]}]),
            ".name",
        ),
        (
            _document(
                pipelines=[
                    {"name": "p", "steps": [{"name": "a", "command": "x", "env": {"A\n": "1"}}]}
                ]
            ),
            "env.A\n",
        ),
    ],
)
def test_projects_as_code_refuses_a_trailing_newline(db, document, key):
    with pytest.raises(InvalidDocument) as raised:
        parse(document)
    assert any(key in error for error in raised.value.errors), raised.value.errors


def test_the_model_validator_refuses_a_trailing_newline(db):
    project = Project(slug="web", default_environment="production\n")
    with pytest.raises(ValidationError) as raised:
        project.full_clean()
    assert "default_environment" in raised.value.message_dict
    Project(slug="web", default_environment="production").full_clean()


def test_the_runner_never_gives_a_step_a_variable_name_with_a_newline(make_project):
    project = make_project(env={"OK": "1", "BAD\n": "2"}, secrets={"S\n": "x"})
    deployment = Deployment(project=project, environment="production", params={"P\n": "3"})
    env = step_process_env(
        deployment=deployment, project=project, step={"env": {"E\n": "4"}}, position=1, workdir="/"
    )
    assert env["OK"] == "1"
    assert not [name for name in env if "\n" in name]
