"""The API and project fixtures of tests/api and the admin walk's rows, shared here."""

from tests.api.conftest import make_api, project_api  # noqa: F401
from tests.security.test_admin_lookups import secrets_everywhere, viewer  # noqa: F401
