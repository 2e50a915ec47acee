"""POST a delivery to the address the SSRF guard checked: no redirects, bounded time and body.

The connection goes to the checked IP address while everything else about the request uses
the URL's host name: the ``Host`` header, TLS SNI and certificate verification. Connection
pools are kept per (scheme, host, port, address) in each worker process, each keeping as
many idle connections as deliveries may be in flight to one endpoint, so keep-alive
connections are reused without ever reaching an address that was not checked.
"""

import contextlib
import socket
import threading
import time
import tomllib
from collections import OrderedDict
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from requests.certs import where as default_ca_bundle
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, Timeout
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.exceptions import TimeoutError as HTTPTimeout
from urllib3.util import connection as urllib3_connection

from webhooks import conf
from webhooks.ssrf import Address, Target

MAX_POOLS = 32
# Read at most this much of a response: the first 4 KiB are kept, the rest is read only so
# that the connection can be reused, and a larger body closes it instead.
DRAIN_LIMIT = 64 * 1024
CHUNK = 16 * 1024


def _version() -> str:
    try:
        return metadata.version("conveyor")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0"


USER_AGENT = f"Conveyor-Webhooks/{_version()}"


class TransportError(Exception):
    """The request got no HTTP answer: the connection failed or timed out."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    latency_ms: int


class _PinnedMixin:
    """Open the TCP connection to ``pinned_address`` instead of resolving ``host`` again."""

    def __init__(self, *args, pinned_address: str, **kwargs) -> None:
        self.pinned_address = pinned_address
        super().__init__(*args, **kwargs)

    def _new_conn(self) -> socket.socket:
        try:
            return urllib3_connection.create_connection(
                (self.pinned_address, self.port),
                self.timeout,
                source_address=self.source_address,
                socket_options=self.socket_options,
            )
        except TimeoutError as exc:
            raise ConnectTimeoutError(self, f"connect to {self.pinned_address} timed out") from exc
        except OSError as exc:
            raise NewConnectionError(self, f"connect to {self.pinned_address}: {exc}") from exc


class PinnedHTTPConnection(_PinnedMixin, HTTPConnection):
    pass


class PinnedHTTPSConnection(_PinnedMixin, HTTPSConnection):
    pass


class PinnedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = PinnedHTTPConnection


class PinnedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = PinnedHTTPSConnection


_pools: OrderedDict[tuple, HTTPConnectionPool] = OrderedDict()
_pools_lock = threading.Lock()


def _pool(target: Target, address: Address, ca_certs: str | None) -> HTTPConnectionPool:
    """Return this process's pool for (target, checked address), creating it if needed."""
    key = (target.scheme, target.host, target.port, str(address), ca_certs)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is not None:
            _pools.move_to_end(key)
            return pool
        options = {
            "maxsize": _connections_kept(),
            "block": False,
            "retries": False,
            "pinned_address": str(address),
        }
        if target.scheme == "https":
            pool = PinnedHTTPSConnectionPool(
                target.host,
                target.port,
                cert_reqs="CERT_REQUIRED",
                ca_certs=ca_certs or default_ca_bundle(),
                **options,
            )
        else:
            pool = PinnedHTTPConnectionPool(target.host, target.port, **options)
        _pools[key] = pool
        while len(_pools) > MAX_POOLS:
            _, evicted = _pools.popitem(last=False)
            evicted.close()
        return pool


def _connections_kept() -> int:
    """How many idle connections a pool keeps: one per delivery that may be in flight to
    the endpoint from this process, so a busy endpoint's connections stay alive instead of
    being opened and dropped for every delivery beyond the pool's size."""
    settings = conf.get()
    return max(1, min(settings.endpoint_concurrency, settings.concurrency))


def post(
    target: Target,
    address: Address,
    *,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    excerpt_bytes: int,
    ca_certs: str | None = None,
) -> Response:
    """POST ``body`` to ``target`` over a connection to ``address``; return the answer.

    Redirects are returned, not followed. Raises TransportError when no answer came.
    """
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **headers,
    }
    pool = _pool(target, address, ca_certs)
    started = time.monotonic()
    deadline = started + timeout * 2
    try:
        answer = pool.urlopen(
            "POST",
            target.path,
            body=body,
            headers=headers,
            redirect=False,
            retries=False,
            timeout=Timeout(connect=timeout, read=timeout),
            preload_content=False,
            release_conn=False,
            assert_same_host=False,
        )
        try:
            excerpt = _read_bounded(answer, deadline, excerpt_bytes)
        finally:
            answer.release_conn()
    except HTTPError as exc:
        # NewConnectionError subclasses ConnectTimeoutError in urllib3 2, but is no timeout.
        timed_out = isinstance(exc, HTTPTimeout) and not isinstance(exc, NewConnectionError)
        raise TransportError(_describe(exc, target, address), timed_out=timed_out) from exc
    latency_ms = int((time.monotonic() - started) * 1000)
    return Response(
        status=answer.status, headers=dict(answer.headers), body=excerpt, latency_ms=latency_ms
    )


def _read_bounded(answer, deadline: float, keep: int) -> bytes:
    """Return the first ``keep`` bytes of the body; read on (bounded) so the connection lives."""
    kept, total = bytearray(), 0
    while total < DRAIN_LIMIT:
        if time.monotonic() > deadline:
            answer.close()
            raise TransportError("response body timed out", timed_out=True)
        chunk = answer.read(CHUNK)
        if not chunk:
            return bytes(kept)
        total += len(chunk)
        if len(kept) < keep:
            kept += chunk[: keep - len(kept)]
    with contextlib.suppress(Exception):
        answer.close()  # too long to drain: drop the connection instead of reusing it
    return bytes(kept)


def _describe(exc: HTTPError, target: Target, address: Address) -> str:
    where = f"{target.host}:{target.port} ({address})"
    if isinstance(exc, NewConnectionError):
        return f"connection to {where} failed: {exc.__cause__ or exc}"
    if isinstance(exc, ConnectTimeoutError):
        return f"connection to {where} timed out"
    if isinstance(exc, ReadTimeoutError):
        return f"{where} did not answer in time"
    if isinstance(exc, SSLError):
        return f"TLS with {where} failed: {exc}"
    if isinstance(exc, ProtocolError):
        return f"connection to {where} broke: {exc.args[-1] if exc.args else exc}"
    return f"{exc.__class__.__name__}: {exc}"
