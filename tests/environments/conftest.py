"""Fixtures for environments tests: the API clients and the git repository of the others."""

from tests.api.conftest import make_api, project_api  # noqa: F401 - fixtures used here
from tests.deployments.conftest import git_repo  # noqa: F401 - a fixture used here
