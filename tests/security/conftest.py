"""The API and project fixtures of tests/api, shared with the security tests."""

from tests.api.conftest import make_api, project_api  # noqa: F401
