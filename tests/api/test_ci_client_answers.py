"""scripts/conveyor-deploy against real local HTTP servers that redirect or answer non-JSON.

The servers record every request's headers, so a test sees whether the token went anywhere
it must not.
"""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.processes import ROOT

CLIENT = str(ROOT / "scripts" / "conveyor-deploy")
TOKEN = "cvy_ci-client-token-123"
DEPLOYMENT = {"id": 7, "ref": "main", "commit_sha": "", "environment": "production"}


class Recorder(BaseHTTPRequestHandler):
    """Answer as a tiny Conveyor, or as ``routes`` says; record each request's headers."""

    routes: dict
    seen: list

    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.seen.append((self.command, self.path, dict(self.headers)))
        route = next((r for prefix, r in self.routes.items() if self.path.startswith(prefix)), None)
        if route is None:
            status, headers, body = self._conveyor()
        else:
            status, headers, body = route
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _conveyor(self):
        json_type = {"Content-Type": "application/json"}
        if "/logs" in self.path:
            body = {"text": "deploying\n", "next_offset": 10, "complete": True}
        elif self.command == "POST":
            body = {**DEPLOYMENT, "status": "queued"}
        else:
            body = {**DEPLOYMENT, "status": "success", "failure_reason": ""}
        return 200, json_type, json.dumps(body).encode()

    do_GET = do_POST = _answer


@pytest.fixture
def serve():
    """Start recording servers; ``serve(routes)`` returns (base url, seen requests)."""
    servers = []

    def start(routes: dict | None = None):
        seen: list = []
        handler = type(
            "Handler", (Recorder,), {"routes": {} if routes is None else routes, "seen": seen}
        )
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run_client(url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_"))}
    env.update(CONVEYOR_URL=url, CONVEYOR_TOKEN=TOKEN)
    return subprocess.run(
        [sys.executable, CLIENT, "--poll", "1", "--project", "shop", "--ref", "main"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_clear_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_not_followed_with_the_token(serve, status):
    elsewhere, seen_elsewhere = serve()
    redirect = {"Location": f"{elsewhere}/api/v1/projects/shop/deployments"}
    url, _ = serve({"/api/v1/projects/shop/deployments": (status, redirect, b"")})
    done = run_client(url)
    assert done.returncode == 2
    line = one_clear_line(done)
    assert "another origin" in line and TOKEN not in line
    assert not [headers for *_, headers in seen_elsewhere if "Authorization" in headers]


def test_a_redirect_within_the_origin_is_followed_and_keeps_the_token(serve):
    routes: dict = {}
    url, seen = serve(routes)
    # The log request is moved within the same server: the client follows it there.
    moved = {"Location": f"{url}/moved/api/v1/deployments/7/logs"}
    routes["/api/v1/deployments/7/logs"] = (302, moved, b"")
    done = run_client(url)
    assert done.returncode == 0, done.stderr
    followed = [headers for _, path, headers in seen if path.startswith("/moved/")]
    assert followed and followed[0]["Authorization"] == f"Bearer {TOKEN}"
    assert "deploying" in done.stdout


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b"<html><body>Sign in to the corporate proxy</body></html>"),
        (500, b"<html><body><h1>Internal Server Error</h1></body></html>"),
        (404, b"<html><body>nginx: not found</body></html>"),
        (200, b'{"unexpected": "shape"}'),
    ],
)
def test_an_answer_that_is_not_conveyors_json_is_one_line_and_exit_2(serve, status, body):
    kind = "application/json" if body.startswith(b"{") else "text/html"
    url, _ = serve({"/api/v1/projects/": (status, {"Content-Type": kind}, body)})
    done = run_client(url)
    assert done.returncode == 2
    line = one_clear_line(done)
    assert line.startswith("conveyor: ") and TOKEN not in line
    if not body.startswith(b"{"):
        assert "not a Conveyor API answer" in line and "text/html" in line
