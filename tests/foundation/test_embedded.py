"""Conveyor on its embedded defaults (SQLite + filesystem broker) and on PostgreSQL + Redis."""

import contextlib
import fcntl
import json
import os
import pty
import re
import signal
import subprocess
import termios
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django_celery_results.models import TaskResult

from tests.processes import PYTHON, ROOT, Worker, alive, free_port, process_tree, wait_until


def embedded_env(tmp_path) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_", "CELERY_", "CONVEYOR_"))
    }
    env.update(
        CONVEYOR_VAR_DIR=str(tmp_path / "var"),
        PYTHONUNBUFFERED="1",
        CONVEYOR_ADMIN_PASSWORD="pw-for-tests",
    )
    return env


def manage(env, *args, timeout=120) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_a_worker_on_postgresql_and_redis_stores_a_task_result(start_worker):
    from tests.jobtasks import add

    start_worker(concurrency=1)
    result = add.delay(2, 3)
    wait_until(
        lambda: TaskResult.objects.filter(task_id=result.id, status="SUCCESS").exists(),
        timeout=60,
        message="the result row",
    )
    assert TaskResult.objects.get(task_id=result.id).result == "5"


def test_a_worker_on_the_embedded_defaults_runs_a_task_and_a_job(tmp_path):
    env = embedded_env(tmp_path)
    manage(env, "migrate", "--noinput")
    worker = Worker(env, queues="default", concurrency=1)
    try:
        script = (
            "import tests.jobtasks, time; from jobs import services; from jobs.models import Job; "
            "from django_celery_results.models import TaskResult as R; "
            "r = tests.jobtasks.add.delay(20, 22); j = services.enqueue('jobs.noop', {}); "
            "deadline = time.time() + 60\n"
            "while time.time() < deadline and not (R.objects.filter(task_id=r.id).exists() and "
            "Job.objects.get(pk=j.pk).status == 'succeeded'): time.sleep(0.2)\n"
            "print(R.objects.get(task_id=r.id).result, Job.objects.get(pk=j.pk).status)"
        )
        out = manage(env, "shell", "-c", script)
        assert out.stdout.strip().splitlines()[-1] == "42 succeeded"
    finally:
        worker.stop()
    assert (tmp_path / "var" / "conveyor.sqlite3").exists()


def http(port: int, path: str, *, token: str | None = None, body: dict | None = None):
    """Return (status, parsed body) or None while nothing answers."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if "json" in response.headers[
                "Content-Type"
            ] else raw
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return None


def start_make_run(env: dict, log_path: Path) -> tuple[subprocess.Popen, int]:
    """Start ``make run`` in a terminal of its own; return it and the terminal's fd."""
    terminal, tty = pty.openpty()  # so Ctrl-C can be typed into it

    def own_terminal() -> None:
        os.setsid()
        fcntl.ioctl(tty, termios.TIOCSCTTY, 0)
        # As a terminal or a process manager starts it: a test runner started in the
        # background of a script (scripts/run-tests) ignores SIGINT and SIGQUIT, which make
        # would inherit and then never catch.
        for signum in (signal.SIGINT, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)

    with log_path.open("wb") as log:
        stack = subprocess.Popen(
            ["make", "run"],
            cwd=ROOT,
            env=env,
            stdin=tty,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=own_terminal,
        )
    os.close(tty)
    return stack, terminal


@contextlib.contextmanager
def log_shown_on_failure(log_path: Path):
    """A failed assertion inside also shows the end of ``make run``'s output."""
    try:
        yield
    except AssertionError as failure:
        tail = log_path.read_text(errors="replace")[-6000:]
        raise AssertionError(f"{failure}\n--- make run's output, its end ---\n{tail}") from None


def wait_until_ready(port: int, log_path: Path) -> str:
    """Wait for the stack to serve and beat to start; return the demo token it printed."""
    status, body = wait_until(
        lambda: http(port, "/healthz"), timeout=180, interval=0.5, message="/healthz"
    )
    assert status == 200 and body == {"database": "ok", "broker": "ok"}
    wait_until(lambda: "beat: Starting" in log_path.read_text(), timeout=60, message="beat started")
    return re.search(r"Token:\s+(cvy_\S+)", log_path.read_text()).group(1)


@pytest.mark.slow
def test_make_run_serves_deploys_and_stops_cleanly(tmp_path):
    """``make run`` on the embedded defaults: health, admin, a real deployment, Ctrl-C."""
    env = embedded_env(tmp_path)
    port = free_port()
    env["PORT"] = str(port)
    log_path = tmp_path / "make-run.log"
    stack, terminal = start_make_run(env, log_path)
    try:
        token = wait_until_ready(port, log_path)
        output = log_path.read_text()
        assert f"http://127.0.0.1:{port}/admin/  (user admin, password pw-for-tests" in output
        assert f"curl -s -X POST http://127.0.0.1:{port}/api/v1/projects/demo/deployments" in output
        status, body = wait_until(
            lambda: http(port, "/admin/login/"), timeout=30, message="the admin login"
        )
        assert status == 200 and b'name="password"' in body
        status, created = http(
            port,
            "/api/v1/projects/demo/deployments",
            token=token,
            body={"ref": "main", "pipeline": "default"},
        )
        assert status == 201, created

        def finished():
            answer = http(port, f"/api/v1/deployments/{created['id']}?wait=5", token=token)
            return (
                answer[1]
                if answer and answer[1]["status"] in ("success", "failed", "cancelled")
                else None
            )

        with log_shown_on_failure(log_path):
            final = wait_until(
                finished, timeout=120, interval=0.5, message="the demo deployment to finish"
            )
        assert final["status"] == "success", final
        tree = process_tree(stack.pid)
        commands = {Path(f"/proc/{pid}/cmdline").read_bytes() for pid in tree if alive(pid)}
        for program in (b"gunicorn", b"worker", b"beat"):
            assert any(program in command for command in commands), program
    finally:
        stopping = time.monotonic()
        os.write(terminal, b"\x03")  # Ctrl-C, typed into make run's terminal
        status = stack.wait(timeout=60)
        stop_seconds = time.monotonic() - stopping
        os.close(terminal)
    wait_until(
        lambda: not [pid for pid in tree if alive(pid)], timeout=30, message="every process to exit"
    )
    # Idle: every process ends on its own within a few seconds, cleanly, nothing SIGKILLed.
    output = log_path.read_text()
    assert status == 0, output[-3000:]
    assert stop_seconds < 10, stop_seconds
    assert "SIGKILL" not in output and "still running after" not in output
    for program in ("web", "worker", "deployer", "beat"):
        assert f"{program} stopped (rc=0)" in output, output[-3000:]


@pytest.mark.slow
def test_make_run_stopped_mid_deployment_ends_it_worker_shutdown_and_keeps_its_token(tmp_path):
    """SIGINT sent to make's own pid (as a process manager does) stops the embedded stack in
    the middle of a deployment: it ends ``failed/worker_shutdown`` with the log saying why, as
    on PostgreSQL + Redis, and the next start prints the same demo token."""
    env = embedded_env(tmp_path)
    env["CONVEYOR_SHUTDOWN_GRACE"] = "2s"
    port = free_port()
    env["PORT"] = str(port)
    log_path = tmp_path / "make-run.log"
    stack, terminal = start_make_run(env, log_path)
    try:
        token = wait_until_ready(port, log_path)
        status, created = http(
            port,
            "/api/v1/projects/demo/deployments",
            token=token,
            body={"ref": "main", "pipeline": "slow"},
        )
        assert status == 201, created
        logs = f"/api/v1/deployments/{created['id']}/logs"
        with log_shown_on_failure(log_path):
            wait_until(
                lambda: "tick 2/60" in str((http(port, logs, token=token) or (0, b""))[1]),
                timeout=120,
                interval=0.5,
                message="the slow step to tick",
            )
        stack.send_signal(signal.SIGINT)  # to make itself, not its process group
        status = stack.wait(timeout=60)
    finally:
        if stack.poll() is None:
            stack.terminate()
            stack.wait(timeout=60)
        os.close(terminal)
    output = log_path.read_text()
    assert "SIGINT (to make) received: stopping" in output, output[-3000:]
    assert status == -signal.SIGINT  # make dies of the signal once its recipe stopped
    assert "SIGKILL" not in output and "still running after" not in output
    script = (
        "from deployments.models import Deployment; from jobs.models import Job; "
        "from deployments.selectors import deployment_logs; "
        f"d = Deployment.objects.get(pk={created['id']}); "
        "print(d.status, d.failure_reason, Job.objects.get(pk=d.job_id).status); "
        "print(deployment_logs(d)['text'])"
    )
    shown = manage(env, "shell", "--no-imports", "-c", script).stdout
    assert shown.splitlines()[0] == "failed worker_shutdown succeeded", shown
    assert "step wait was stopped (worker shutdown)" in shown, shown
    assert "conveyor: the worker shut down in step 'wait'" in shown, shown
    again = manage(env, "seed_demo").stdout
    assert f"Token:    {token}  (deploy scope, project demo; kept in var/demo-token)" in again
