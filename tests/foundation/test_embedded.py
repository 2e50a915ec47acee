"""Conveyor on its embedded defaults (SQLite + filesystem broker) and on PostgreSQL + Redis."""

import os
import signal
import subprocess
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


@pytest.mark.slow
def test_the_make_run_stack_serves_and_stops_cleanly(tmp_path):
    env = embedded_env(tmp_path)
    port = free_port()
    env["PORT"] = str(port)
    manage(env, "migrate", "--noinput")
    manage(env, "setup_periodic_tasks")
    seeded = manage(env, "seed_demo")
    assert "user admin, password pw-for-tests" in seeded.stdout
    log = (tmp_path / "honcho.log").open("wb")
    stack = subprocess.Popen(
        [str(ROOT / ".venv/bin/honcho"), "start", "-f", "scripts/Procfile", "-d", str(ROOT)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def get(path):
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}{path}", timeout=5
                ) as response:
                    return response.status, response.read()
            except OSError:
                return None

        status, body = wait_until(
            lambda: get("/healthz"), timeout=90, interval=0.5, message="/healthz"
        )
        assert status == 200 and b'"database": "ok"' in body and b'"broker": "ok"' in body
        status, body = wait_until(
            lambda: get("/admin/login/"), timeout=30, message="the admin login"
        )
        assert status == 200 and b'name="password"' in body
        wait_until(
            lambda: "ready." in (tmp_path / "honcho.log").read_text(),
            timeout=60,
            message="worker ready",
        )
        wait_until(
            lambda: "beat: Starting" in (tmp_path / "honcho.log").read_text(),
            timeout=60,
            message="beat started",
        )
        tree = process_tree(stack.pid)
        commands = {Path(f"/proc/{pid}/cmdline").read_bytes() for pid in tree}
        for program in (b"gunicorn", b"worker", b"beat"):
            assert any(program in command for command in commands), program
    finally:
        stack.send_signal(signal.SIGINT)
        stack.wait(timeout=60)
        log.close()
    wait_until(
        lambda: not [pid for pid in tree if alive(pid)], timeout=30, message="every process to exit"
    )
