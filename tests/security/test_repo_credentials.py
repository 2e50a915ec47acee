"""A password in a repository URL never reaches a log, event, notification, page or error.

The repository is served over (dumb) HTTP by a real server, cloned by a real worker; its
URL carries ``deployer:<token>``.
"""

import functools
import io
import json
import logging
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from deployments.maintenance.fetch import fetch_workspaces
from deployments.models import Workspace
from deployments.services import deployment_create
from jobs.models import Notification
from project.logging import JsonFormatter
from project.redaction import redact_text, redact_url
from tests.deployments.conftest import git_repo, log_text, run_git, wait_for  # noqa: F401, F811
from webhooks.models import Event

TOKEN = "s3cr3t-tok3n-9f8e7d"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def served_repo(git_repo, tmp_path):  # noqa: F811 - the fixture imported above
    """Serve a bare clone of ``git_repo`` over HTTP; yield (url with credentials, server)."""
    root = tmp_path / "served"
    root.mkdir()
    bare = root / "app.git"
    run_git(tmp_path, "clone", "--bare", "--quiet", str(git_repo), str(bare))
    run_git(bare, "update-server-info")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://deployer:{TOKEN}@127.0.0.1:{server.server_port}/app.git", server
    server.shutdown()
    server.server_close()


def test_the_password_never_leaves_through_logs_events_or_pages(
    make_project, deploy_worker, served_repo
):
    url, server = served_repo
    staff = get_user_model().objects.create_superuser("ops", "ops@example.com", "pw-123456")
    project = make_project("credproj", repo=url)
    worker = deploy_worker()

    failed = wait_for(deployment_create(project=project, ref="no-such-branch"), "failed")
    assert failed.failure_reason == "git_error"
    log = log_text(failed)
    assert "deployer:***@" in log and TOKEN not in log
    assert TOKEN not in failed.error
    # A good deployment makes the workspace healthy again, so the next failure is announced.
    assert (
        wait_for(deployment_create(project=project, ref="main"), "success", "failed").status
        == "success"
    )

    server.shutdown()  # the remote goes away: the next fetch fails and is announced
    server.server_close()
    assert fetch_workspaces().failed == 1
    workspace = Workspace.objects.get(project=project)
    assert TOKEN not in workspace.last_fetch_error
    event = Event.objects.get(type="workspace.sync_failed")
    assert TOKEN not in event.body and "deployer:***@" in event.body
    notes = Notification.objects.filter(recipient=staff, topic="workspace.sync_failed")
    assert notes.exists() and not [n for n in notes if TOKEN in n.title + n.body]

    assert TOKEN not in worker.text()

    client = Client()
    client.force_login(staff)
    for path in (
        "/admin/deployments/project/",
        f"/admin/deployments/project/{project.pk}/change/",
        "/admin/deployments/workspace/",
        f"/admin/deployments/workspace/{workspace.pk}/change/",
        f"/admin/deployments/deployment/{failed.pk}/change/",
        f"/admin/webhooks/event/{event.pk}/change/",
    ):
        page = client.get(path)
        assert page.status_code == 200, path
        assert TOKEN not in page.content.decode(), path


def test_a_json_log_line_never_carries_a_url_password():
    record = logging.makeLogRecord(
        {"msg": f"cloning https://u:{TOKEN}@git.example.com/x.git", "repo": f"https://{TOKEN}@h/x"}
    )
    line = JsonFormatter().format(record)
    assert TOKEN not in line
    assert json.loads(line)["event"] == "cloning https://u:***@git.example.com/x.git"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:tok@host/repo.git", "https://user:***@host/repo.git"),
        ("https://tok@host:8443/repo.git", "https://***@host:8443/repo.git"),
        ("ssh://git@host/repo.git", "ssh://git@host/repo.git"),
        ("git@host:repo.git", "git@host:repo.git"),
        ("/srv/repo.git", "/srv/repo.git"),
    ],
)
def test_redaction_keeps_the_user_and_hides_the_password(url, shown):
    assert redact_url(url) == shown
    assert redact_text(f"error: {url} failed") == f"error: {shown} failed"


def test_apply_projects_warns_about_a_password_in_the_url(db, tmp_path):
    document = tmp_path / "projects.yaml"
    repo = f"https://deployer:{TOKEN}@git.example.com/app.git"
    document.write_text(yaml.safe_dump({"projects": [{"slug": "web", "repo": repo}]}))
    out = io.StringIO()
    call_command("apply_projects", str(document), stdout=out)
    assert "warning: project web: the repo URL carries a password" in out.getvalue()
    assert TOKEN not in out.getvalue()


def test_the_step_log_masker_covers_the_repo_password(make_project):
    from deployments.runner.masking import SecretMasker, project_secrets

    project = make_project(repo=f"https://deployer:{TOKEN}@h/x.git", secrets={"API": "k-123456"})
    masker = SecretMasker(project_secrets(project))
    out = masker.feed(f"remote: https://deployer:{TOKEN}@h/x.git k-123456\n".encode())
    assert (out + masker.flush()) == b"remote: https://deployer:***@h/x.git ***\n"
