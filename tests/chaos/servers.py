"""Private servers a chaos scenario may stop, restart or break: PostgreSQL, and the broker swap."""

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.processes import free_port, wait_until

PG_BIN_DIRS = ("/usr/local/bin", *sorted(map(str, Path("/usr/lib/postgresql").glob("*/bin"))))


def pg_binary(name: str) -> str | None:
    for directory in PG_BIN_DIRS:
        path = Path(directory) / name
        if path.exists():
            return str(path)
    return shutil.which(name)


class PostgresCluster:
    """A private PostgreSQL cluster in a temp dir, on a free port, owned by ``postgres``.

    initdb refuses to run as root, so as root the cluster is made and run as the
    ``postgres`` user; otherwise as the current user.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="chaos-pg-"))
        self.data = self.dir / "data"
        self.user = "postgres" if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/conveyor"

    def _run(self, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        if self.user:
            command = ("runuser", "-u", self.user, "--", *command)
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True)

    def init(self) -> "PostgresCluster":
        if self.user:
            shutil.chown(self.dir, self.user)
        self._run(
            pg_binary("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        self.start()
        self._run(pg_binary("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U",
                  "postgres", "conveyor")  # fmt: skip
        return self

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off"
        self._run(
            pg_binary("pg_ctl"), "-D", str(self.data), "-o", options, "-l",
            str(self.dir / "log"), "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(pg_binary("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop(mode="immediate")  # what a crash does: no checkpoint, clients cut
        self.start()

    def destroy(self) -> None:
        self.stop(mode="immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def broker(url: str):
    """Publish from this test process to ``url`` (a private broker) for the block."""
    from django.conf import settings

    from project.celery import app

    def reset() -> None:
        from kombu import pools

        pools.reset()  # the producer pools are kept per broker URL and closed with it
        if app._pool is not None:
            app._pool.force_close_all()
        app._pool = None
        app.amqp._producer_pool = None

    # Celery prefers the CELERY_BROKER_URL environment variable to broker_url; the read and
    # write URLs are looked up first.
    previous = (app.conf.get("broker_write_url"), app.conf.get("broker_read_url"))
    reset()
    app.conf.broker_write_url = app.conf.broker_read_url = url
    old_setting = settings.CELERY_BROKER_URL
    settings.CELERY_BROKER_URL = url
    try:
        yield
    finally:
        reset()
        app.conf.broker_write_url, app.conf.broker_read_url = previous
        settings.CELERY_BROKER_URL = old_setting


def port_answers(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(port: int, *, timeout: float = 60) -> None:
    wait_until(lambda: port_answers(port), timeout=timeout, message=f"port {port} to answer")
