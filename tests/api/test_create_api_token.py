"""manage.py create_api_token: the token alone on the last line, bound as asked."""

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from project.access.tokens import token_authenticate


def create(*args) -> tuple[str, str]:
    out = io.StringIO()
    call_command("create_api_token", *args, stdout=out)
    lines = out.getvalue().strip().splitlines()
    return lines[-1], out.getvalue()


def test_a_project_token_defaults_to_deploy_and_is_bound(make_project):
    make_project("app")
    make_project("other")
    raw, output = create("--project", "app", "--name", "github")
    token = token_authenticate(raw)
    assert token is not None and token.scope == "deploy" and token.name == "github"
    assert [p.slug for p in token.projects.all()] == ["app"]
    assert raw not in output.splitlines()[0]  # printed once, alone on the last line


def test_scopes_defaults_and_expiry(make_project):
    make_project("app")
    read, _ = create("--project", "app", "--scope", "read")
    assert token_authenticate(read).scope == "read"
    admin, _ = create()
    assert token_authenticate(admin).scope == "admin"
    expiring, _ = create("--scope", "admin", "--expires-in", "90d")
    expires_at = token_authenticate(expiring).expires_at
    assert timezone.now() + timedelta(days=89) < expires_at < timezone.now() + timedelta(days=91)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--project", "nope"), "no such project: nope"),
        (("--scope", "read"), "needs at least one --project"),
        (("--scope", "admin", "--expires-in", "soon"), "--expires-in"),
    ],
)
def test_bad_arguments_are_refused_with_a_message(make_project, args, message):
    make_project("app")
    with pytest.raises(CommandError, match=message):
        create(*args)
