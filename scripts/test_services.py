"""Check (and if needed start) the PostgreSQL and Redis servers the test suite talks to."""

import os
import shutil
import socket
import subprocess
import sys
import time
from urllib.parse import urlparse

DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/conveyor")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
HOW_TO_GET = (
    "docker compose up -d postgres redis, then run with "
    "TEST_DATABASE_URL=postgres://conveyor:conveyor@127.0.0.1:5432/conveyor_test "
    "(the compose file's user)   (or: apt-get install postgresql redis-server)"
)


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def wait_for(host: str, port: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if reachable(host, port):
            return True
        time.sleep(0.5)
    return False


def start_postgres(port: int) -> bool:
    if not shutil.which("pg_ctlcluster") or not os.path.isdir("/etc/postgresql"):
        return False
    for version in sorted(os.listdir("/etc/postgresql")):
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"],
            check=False,
            capture_output=True,
        )
    return True


def start_redis(port: int) -> bool:
    if not shutil.which("redis-server"):
        return False
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=False,
        capture_output=True,
    )
    return True


def ensure(name: str, url: str, default_port: int, start) -> None:
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or default_port
    if reachable(host, port):
        print(f"{name}: ok ({host}:{port})")
        return
    local = host in ("127.0.0.1", "localhost", "::1")
    if local and start(port) and wait_for(host, port):
        print(f"{name}: started ({host}:{port})")
        return
    sys.exit(
        f"{name} is not reachable at {host}:{port} and could not be started here.\n"
        f"Get one with: {HOW_TO_GET}\nor point the tests at yours with "
        f"{'TEST_DATABASE_URL' if name == 'PostgreSQL' else 'TEST_REDIS_URL'}=..."
    )


def ensure_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/") or "conveyor"
    admin_url = parsed._replace(path="/postgres").geturl()
    try:
        conn = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        sys.exit(
            f"PostgreSQL answers but refused the connection as {parsed.username!r}: {exc}\n"
            "Point the tests at a server and user that may create databases with "
            "TEST_DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/conveyor"
        )
    with conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"PostgreSQL: created database {name}")


def ensure_chromium() -> None:
    """Install Debian's Chromium for the browser tests when we can (root with apt-get)."""
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        print("Chromium: ok")
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("Chromium: installing Debian's chromium for the browser tests")
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium"],
            check=False,
            env=env,
            stdout=subprocess.DEVNULL,
        )
    if not shutil.which("chromium"):
        print("Chromium: missing; the browser tests will be skipped (apt-get install chromium)")


if __name__ == "__main__":
    ensure_chromium()
    ensure("PostgreSQL", DATABASE_URL, 5432, start_postgres)
    ensure("Redis", REDIS_URL, 6379, start_redis)
    ensure_database(DATABASE_URL)
