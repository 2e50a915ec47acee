"""CONVEYOR_HTTPS=true gives the settings `check --deploy` asks of production."""

import json
import subprocess

import pytest

from tests.processes import PYTHON, ROOT

CHECKS = ("security.W004", "security.W008", "security.W012", "security.W016")


def _check_deploy(tmp_path, **extra) -> str:
    # The production settings of docs/operations.md, "Security".
    env = {
        "PATH": "/usr/bin:/bin",
        "CONVEYOR_VAR_DIR": str(tmp_path),
        "DJANGO_SECRET_KEY": "k" * 20 + "Xy9#pQ2!mZ8$wR4^tL6&vN1*bH3(jF5)" + "s" * 20,
        "DJANGO_ALLOWED_HOSTS": "conveyor.example.com",
        **extra,
    }
    done = subprocess.run(
        [PYTHON, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.stdout + done.stderr


@pytest.mark.parametrize("https", ["true", "false"])
def test_check_deploy_warns_only_without_https(tmp_path, https):
    output = _check_deploy(tmp_path, CONVEYOR_HTTPS=https)
    found = [check for check in CHECKS if check in output]
    assert found == ([] if https == "true" else list(CHECKS)), output


def test_https_turns_on_secure_cookies_the_proxy_header_and_hsts(tmp_path):
    names = "SECURE_PROXY_SSL_HEADER SESSION_COOKIE_SECURE CSRF_COOKIE_SECURE SECURE_SSL_REDIRECT"
    script = (
        "import json; from project import settings as s; "
        f"print(json.dumps([getattr(s, n) for n in {(names + ' SECURE_HSTS_SECONDS').split()!r}]))"
    )
    env = {"PATH": "/usr/bin:/bin", "CONVEYOR_VAR_DIR": str(tmp_path), "CONVEYOR_HTTPS": "true",
           "CONVEYOR_HSTS_MAX_AGE": "1h"}  # fmt: skip
    out = subprocess.run(
        [PYTHON, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [["HTTP_X_FORWARDED_PROTO", "https"], True, True, True, 3600]
