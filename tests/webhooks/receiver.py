"""A real HTTP receiver on 127.0.0.1 for the tests, answering from a script per path."""

import contextlib
import socket
import ssl
import struct
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.processes import wait_until


@dataclass(frozen=True)
class Reply:
    """What the receiver answers to one request; ``delay`` seconds first (a hang)."""

    status: int = 200
    body: bytes = b"ok"
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    reset: bool = False  # close the connection with a TCP reset instead of answering


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when it arrived

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def do_POST(self) -> None:  # noqa: N802 - the http.server naming
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        receiver = self.server.receiver
        reply = receiver.record(
            Received(self.path, dict(self.headers.items()), body, time.monotonic())
        )
        if reply.delay and receiver.stopping.wait(reply.delay):
            return
        if reply.reset:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        with contextlib.suppress(OSError):
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

    def log_message(self, format, *args) -> None:  # noqa: A002 - keep test output quiet
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: "Receiver"


class Receiver:
    """Serve POSTs on a free port; each path answers its scripted replies, then ``default``."""

    def __init__(self, default: Reply | None = None, *, tls: tuple[str, str] | None = None) -> None:
        self.default = default or Reply()
        self.requests: list[Received] = []
        self.server_names: list[str | None] = []  # the TLS SNI of each handshake
        self.stopping = threading.Event()
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.receiver = self
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            context.sni_callback = lambda sock, name, ctx: self.server_names.append(name)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, path: str = "/hook") -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def script(self, path: str, *replies: Reply) -> None:
        """Answer the next requests to ``path`` with ``replies``, in order."""
        with self._lock:
            self._scripts[path].extend(replies)

    def record(self, request: Received) -> Reply:
        with self._lock:
            self.requests.append(request)
            script = self._scripts[request.path]
            return script.popleft() if script else self.default

    def received(self, path: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if path is None or r.path == path]

    def wait_for(self, count: int, path: str | None = None, timeout: float = 60) -> list[Received]:
        """Wait until at least ``count`` requests (to ``path``) arrived; return them."""
        wait_until(
            lambda: len(self.received(path)) >= count,
            timeout=timeout,
            message=f"{count} request(s) to {path or 'the receiver'}",
        )
        return self.received(path)

    def close(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
