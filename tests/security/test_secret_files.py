"""var/secret_key, the demo admin password and the demo token are private from creation."""

import os
import stat
import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from deployments.management.commands.seed_demo import demo_admin_password, demo_token
from project import secretfiles
from project.access.models import ApiToken, TokenScope
from project.access.tokens import token_authenticate, token_revoke
from tests.processes import PYTHON, ROOT


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def no_chmod(monkeypatch):
    """Make chmod do nothing: a file must be private as created, not fixed afterwards."""
    monkeypatch.setattr(os, "chmod", lambda *a, **k: None)
    monkeypatch.setattr(Path, "chmod", lambda *a, **k: None)
    old = os.umask(0)  # the loosest umask: nothing but the creation mode protects the file
    yield
    os.umask(old)


def _settings_in(var: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-c", "import project.settings"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "CONVEYOR_VAR_DIR": str(var), **env},
        capture_output=True,
        text=True,
    )


def test_the_secret_key_file_is_created_0600_whatever_the_umask(tmp_path):
    script = "import os; os.umask(0); os.chmod = lambda *a, **k: None; import project.settings"
    env = {"PATH": "/usr/bin:/bin", "CONVEYOR_VAR_DIR": str(tmp_path)}
    subprocess.run([PYTHON, "-c", script], cwd=ROOT, env=env, check=True)
    assert mode(tmp_path / "secret_key") == 0o600
    assert len((tmp_path / "secret_key").read_text()) > 40


def test_start_up_refuses_a_secret_key_others_can_read(tmp_path):
    (tmp_path / "secret_key").write_text("k" * 50)
    (tmp_path / "secret_key").chmod(0o644)
    done = _settings_in(tmp_path)
    assert done.returncode != 0
    assert "secret_key" in done.stderr and "chmod 600" in done.stderr


def test_demo_password_and_token_are_created_0600(make_project, settings, tmp_path, no_chmod):
    settings.VAR_DIR = tmp_path
    make_project("demo")
    password, _ = demo_admin_password()
    token, _ = demo_token()
    assert mode(tmp_path / "admin-password") == 0o600
    assert mode(tmp_path / "demo-token") == 0o600
    assert (tmp_path / "admin-password").read_text() == password
    assert demo_token()[0] == token  # kept, not made again
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_the_demo_token_outlives_a_change_of_database(make_project, settings, tmp_path):
    """A kept token that this database never saw (var/ shared by embedded and PostgreSQL)
    is registered as is; only one this database revoked is replaced, and the output says so."""
    settings.VAR_DIR = tmp_path
    project = make_project("demo")
    token, _ = demo_token()
    ApiToken.objects.all().delete()  # as a fresh database beside the same var/ sees it
    again, origin = demo_token()
    assert again == token and "new to this database" in origin
    found = token_authenticate(token)
    assert found is not None and found.scope == TokenScope.DEPLOY
    assert project.api_tokens.filter(pk=found.pk).exists()

    token_revoke(found, actor="test")
    replaced, origin = demo_token()
    assert replaced != token and origin.startswith("NEW:")
    assert (tmp_path / "demo-token").read_text() == replaced
    assert token_authenticate(replaced) is not None


def test_a_demo_token_file_that_holds_no_token_is_replaced(make_project, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    make_project("demo")
    (tmp_path / "demo-token").write_text("cvy_short")
    (tmp_path / "demo-token").chmod(0o600)
    token, origin = demo_token()
    assert token != "cvy_short" and origin.startswith("NEW:")
    assert ApiToken.objects.count() == 1 and token_authenticate(token) is not None


def test_a_readable_secret_file_is_refused(tmp_path):
    path = tmp_path / "demo-token"
    path.write_text("cvy_x")
    path.chmod(0o640)
    with pytest.raises(ImproperlyConfigured, match="chmod 600"):
        secretfiles.read_private(path)


def test_two_creators_agree_on_one_secret(tmp_path):
    path = tmp_path / "secret_key"
    assert secretfiles.write_private(path, "first") is True
    assert secretfiles.write_private(path, "second") is False
    assert secretfiles.kept_secret(path, lambda: "third") == "first"
