"""var/secret_key, the demo admin password and the demo token are private from creation."""

import os
import stat
import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from deployments.management.commands.seed_demo import demo_admin_password, demo_token
from project import secretfiles
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
    token = demo_token()
    assert mode(tmp_path / "admin-password") == 0o600
    assert mode(tmp_path / "demo-token") == 0o600
    assert (tmp_path / "admin-password").read_text() == password
    assert demo_token() == token  # kept, not made again
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


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
