"""A caller that may not see an object gets exactly the answer for one that does not exist."""

import pytest

from deployments.services import deployment_create
from tests.api.conftest import assert_error

MISSING = 987654321


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/deployments/{id}"),
        ("get", "/deployments/{id}/logs"),
        ("post", "/deployments/{id}/retry"),
        ("post", "/deployments/{id}/cancel"),
    ],
)
def test_another_projects_deployment_answers_like_a_missing_one(
    make_project, project_api, method, path
):
    mine, theirs = make_project("mine"), make_project("credproj")
    hidden = deployment_create(project=theirs, ref="main")
    api = project_api("deploy", mine)

    hidden_answer = getattr(api, method)(path.format(id=hidden.pk))
    missing_answer = getattr(api, method)(path.format(id=MISSING))

    hidden_error = assert_error(hidden_answer, 404, "not_found")
    missing_error = assert_error(missing_answer, 404, "not_found")
    assert "credproj" not in hidden_answer.content.decode()
    assert hidden_error == {
        **missing_error,
        "message": missing_error["message"].replace(str(MISSING), str(hidden.pk)),
    }


def test_another_projects_slug_answers_like_a_missing_one(make_project, project_api):
    mine, _ = make_project("mine"), make_project("credproj")
    api = project_api("deploy", mine)
    hidden = assert_error(api.get("/projects/credproj/deployments"), 404, "not_found")
    missing = assert_error(api.get("/projects/nosuchproj/deployments"), 404, "not_found")
    assert hidden == {**missing, "message": missing["message"].replace("nosuchproj", "credproj")}
