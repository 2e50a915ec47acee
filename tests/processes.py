"""Real processes for the tests: Celery workers, beat and private servers on free ports."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def wait_until(
    condition: Callable[[], object],
    *,
    timeout: float = 60,
    interval: float = 0.1,
    message: str = "condition",
) -> object:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_tree(pid: int) -> list[int]:
    """Return ``pid``'s living descendants (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Worker:
    """A ``celery worker`` subprocess whose JSON log lines the test can read."""

    def __init__(
        self,
        env: dict,
        *,
        queues: str | None,
        concurrency: int,
        name: str | None = None,
        include: str | None = "tests.jobtasks",
        extra_args: tuple[str, ...] = (),
        app: str = "project",
    ) -> None:
        self.name = name or f"test-{uuid.uuid4().hex[:8]}"
        self.log_path = Path(tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")[1])
        command = [
            PYTHON,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            *(["--queues", queues] if queues else []),
            "--concurrency",
            str(concurrency),
            "--hostname",
            f"{self.name}@%h",
            *(["--include", include] if include else []),
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *extra_args,
        ]
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self._ready, timeout=60, interval=0.2, message=f"worker {self.name} to be ready")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"worker {self.name} exited early:\n{self.text()[-3000:]}")
        return "ready." in self.text()

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self, name: str) -> list[dict]:
        """Return the structured log lines whose event is ``name``."""
        found = []
        for line in self.text().splitlines():
            if f'"{name}"' not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == name:
                found.append(entry)
        return found

    def children(self) -> list[int]:
        return process_tree(self.pid)

    def kill(self) -> None:
        """SIGKILL the worker and every process under it at once, as a power loss would."""
        pids = [self.pid, *self.children()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        for pid in process_tree(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._log.close()


class RedisServer:
    """A private redis-server on a free port, which a test may stop and start at will."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="redis-")
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._answers, timeout=20, message="private redis to answer")
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


class Beat:
    """A ``celery beat`` subprocess on django-celery-beat's DatabaseScheduler."""

    def __init__(self, env: dict, *, name: str | None = None) -> None:
        self.name = name or f"beat-{uuid.uuid4().hex[:8]}"
        self.log_path = Path(tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")[1])
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "project", "beat", "--loglevel", "INFO"]
            + ["--max-interval", "1", "--pidfile", ""],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self._started, timeout=60, interval=0.2, message=f"{self.name} to start")

    def _started(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited early:\n{self.text()[-3000:]}")
        return "beat: Starting" in self.text()

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def sent(self, task: str) -> int:
        """How many times this beat sent ``task``."""
        return sum(
            1 for line in self.text().splitlines() if "Sending due task" in line and task in line
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()


class WebServer:
    """A gunicorn web process on a free port, serving the app as ``make run`` does."""

    def __init__(self, env: dict, *, threads: int = 4) -> None:
        self.port = free_port()
        self.log_path = Path(tempfile.mkstemp(prefix=f"web-{self.port}-", suffix=".log")[1])
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [PYTHON, "-m", "gunicorn", "project.wsgi", "--bind", f"127.0.0.1:{self.port}",
             "--worker-class", "gthread", "--workers", "1", "--threads", str(threads)],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        wait_until(self._answers, timeout=60, interval=0.2, message=f"web server {self.port}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            text = self.log_path.read_text(errors="replace")
            raise AssertionError(f"web server exited early:\n{text[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()
