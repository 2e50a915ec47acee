"""Secrets on disk are private: var/ and the embedded database, and no password in a clone.

The repository is served over HTTP by a real server that demands Basic authentication, so a
fetch that works proves git got the credentials, and a clone that holds no password proves
it got them at fetch time only.
"""

import base64
import functools
import os
import stat
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from deployments.maintenance.fetch import fetch_workspaces
from deployments.models import Workspace
from deployments.services import deployment_create
from tests.deployments.conftest import commit, git_repo, run_git, wait_for  # noqa: F401
from tests.processes import PYTHON, ROOT

USER, TOKEN = "deployer", "s3cr3t-tok3n-private-77"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class _BasicAuthRepo(SimpleHTTPRequestHandler):
    """Serve files only to requests that carry the right Basic credentials."""

    expected = "Basic " + base64.b64encode(f"{USER}:{TOKEN}".encode()).decode()
    authorized: list[str]

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != self.expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.authorized.append(self.path)
        super().do_GET()


@pytest.fixture
def protected_repo(git_repo, tmp_path):  # noqa: F811 - the fixture imported above
    """Serve a bare clone of ``git_repo`` behind Basic auth; yield (url, origin, log)."""
    root = tmp_path / "served"
    root.mkdir()
    bare = root / "app.git"
    run_git(tmp_path, "clone", "--bare", "--quiet", str(git_repo), str(bare))
    run_git(bare, "update-server-info")
    authorized: list[str] = []
    handler = type("Handler", (_BasicAuthRepo,), {"authorized": authorized})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://{USER}:{TOKEN}@127.0.0.1:{server.server_port}/app.git"
    yield url, bare, authorized
    server.shutdown()
    server.server_close()


def files_holding(root: Path, secret: str) -> list[str]:
    """Return every file under ``root`` whose bytes contain ``secret``."""
    return [
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()
    ]


def test_a_clone_fetched_with_a_password_holds_none_on_disk(
    make_project, deploy_worker, protected_repo, tmp_path
):
    url, bare, authorized = protected_repo
    project = make_project("private", repo=url)
    deploy_worker()
    first = wait_for(deployment_create(project=project, ref="main"), "success", "failed")
    assert first.status == "success", first.error
    assert authorized, "the server never saw the credentials"

    # A new commit on the remote: the next deployment fetches it, still authenticated.
    work = tmp_path / "work"
    run_git(tmp_path, "clone", "--quiet", str(bare), str(work))
    run_git(work, "config", "user.email", "t@example.com")
    run_git(work, "config", "user.name", "T")
    new_sha = commit(work, "2")
    run_git(work, "push", "--quiet", "origin", "main")
    run_git(bare, "update-server-info")
    second = wait_for(deployment_create(project=project, ref="main"), "success", "failed")
    assert second.status == "success", second.error
    assert second.commit_sha == new_sha

    var = tmp_path / "var"
    workspace = var / "workspaces" / "private"
    config = (workspace / "repo.git" / "config").read_text()
    assert f"url = http://127.0.0.1:{url.rsplit(':', 1)[1]}" in config
    assert files_holding(var / "workspaces", TOKEN) == []
    assert mode(var) == 0o700 and mode(var / "workspaces") == 0o700


def test_an_older_clone_whose_config_kept_the_password_is_rewritten_on_fetch(
    make_project, protected_repo, settings, tmp_path
):
    url, _, authorized = protected_repo
    settings.CONVEYOR_WORKSPACES_DIR = str(tmp_path / "workspaces")
    project = make_project("older", repo=url)
    clone = tmp_path / "workspaces" / "older" / "repo.git"
    clone.parent.mkdir(parents=True)
    run_git(tmp_path, "clone", "--bare", "--quiet", url, str(clone))  # as releases before did
    assert TOKEN in (clone / "config").read_text()
    # This host's row (CONVEYOR_DEPLOYER_HOST): each host fetches only its own.
    Workspace.objects.create(
        project=project, host=settings.CONVEYOR_DEPLOYER_HOST, path=str(clone), repo=url
    )
    authorized.clear()

    assert fetch_workspaces().fetched == 1
    assert authorized, "the fetch did not authenticate"
    assert files_holding(tmp_path / "workspaces", TOKEN) == []
    assert mode(tmp_path / "workspaces") == 0o700


def _start_up(var: Path) -> subprocess.CompletedProcess:
    """Run a command that opens the embedded database (SQLite in ``var``); output in stdout."""
    env = {"PATH": os.environ["PATH"], "CONVEYOR_VAR_DIR": str(var), "HOME": str(var.parent)}
    return subprocess.run(
        [PYTHON, "manage.py", "showmigrations", "jobs"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_start_up_creates_var_0700_and_the_database_0600_whatever_the_umask(tmp_path):
    var = tmp_path / "var"
    old = os.umask(0)
    try:
        done = _start_up(var)
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stdout
    assert mode(var) == 0o700
    assert mode(var / "conveyor.sqlite3") == 0o600
    assert "permissions_tightened" not in done.stdout


def test_start_up_makes_an_older_install_private_and_says_so_once(tmp_path):
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    var.chmod(0o755)
    database = var / "conveyor.sqlite3"
    database.write_bytes(b"")
    database.chmod(0o644)
    done = _start_up(var)
    assert done.returncode == 0, done.stdout
    assert mode(var) == 0o700 and mode(database) == 0o600
    lines = [line for line in done.stdout.splitlines() if "permissions_tightened" in line]
    assert len(lines) == 1, done.stdout
    assert "conveyor.sqlite3" in lines[0] and "644->600" in lines[0]
    assert _start_up(var).stdout.count("permissions_tightened") == 0  # fixed for good


@pytest.mark.parametrize(
    ("url", "bare", "credentials"),
    [
        ("https://u:p%40x@h:8443/r.git", "https://h:8443/r.git", ("u", "p@x")),
        ("https://tok@h/r.git", "https://h/r.git", ("tok", "")),
        ("http://u:p@[::1]:80/r", "http://[::1]:80/r", ("u", "p")),
        ("ssh://git@h/r.git", "ssh://git@h/r.git", None),  # ssh: a user name, no secret
        ("/srv/r.git", "/srv/r.git", None),
    ],
)
def test_a_repo_url_is_split_into_the_url_git_keeps_and_the_credentials_it_is_given(
    url, bare, credentials
):
    from deployments.git import remote_url, url_credentials

    assert remote_url(url) == bare
    found = url_credentials(url)
    assert (None if found is None else (found.username, found.password)) == credentials
    assert "p@x" not in repr(found)
