"""Start-up fails in one line on a bad setting, reports unknown variables, waits for services."""

import os
import re
import socket
import subprocess
from urllib.parse import urlparse

import pytest

from tests.foundation.test_embedded import embedded_env
from tests.processes import PYTHON, ROOT, free_port, wait_until

BAD_SETTINGS = [
    ("CONVEYOR_WEBHOOK_TIMEOUT", "abc", "is not a duration (use seconds or 30s, 5m, 24h, 7d)"),
    ("DATABASE_URL", "nosuch://x", "is not a usable database URL (expected postgres://"),
    ("CONVEYOR_WEBHOOK_RETENTION", "10m", "is too short (expected at least 1h)"),
    ("CONVEYOR_MAINTENANCE_RETENTION", "2h", "is too short (expected at least 1d)"),
    ("CONVEYOR_SHUTDOWN_GRACE", "soon", "is not a duration"),
    ("CONVEYOR_SCHEDULE_TICK", "2h", "is too long for CONVEYOR_SCHEDULE_GRACE (1m)"),
    ("CONVEYOR_APPS", "billing_nowhere", "is not an importable module"),
    ("CONVEYOR_METRICS_ALLOW", "10.0.0.0/33", "is not an IP address or network"),
    ("CONVEYOR_WORKER_HEARTBEAT", "0s", "is too short (expected at least 1s)"),
    ("CELERY_BROKER_URL", "nosuch://x", "is not a broker URL (expected redis://"),
    ("DJANGO_CSRF_TRUSTED_ORIGINS", "example.com", "is not an origin (expected a scheme"),
]
ENTRY_POINTS = {
    "manage.py": [PYTHON, "manage.py", "migrate", "--noinput"],
    "worker": [PYTHON, "-m", "celery", "-A", "project", "worker", "--pool", "solo"],
    "beat": [PYTHON, "-m", "celery", "-A", "project", "beat"],
    "gunicorn": [
        str(ROOT / ".venv" / "bin" / "gunicorn"),
        "project.wsgi",
        "--preload",
        "--bind",
        "127.0.0.1:0",
    ],
}

# make's own line after a failed recipe.
MAKE_ERROR = re.compile(r"make(\[\d+\])?: \*\*\*")


# Set when these tests themselves run under `make test`: a user's shell has none of them.
MAKE_VARIABLES = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")


def start(command, env, timeout=60) -> subprocess.CompletedProcess:
    env = {key: value for key, value in env.items() if key not in MAKE_VARIABLES}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def assert_one_line(out: subprocess.CompletedProcess, name: str, value: str, expected: str):
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert lines == [f"conveyor: cannot start: {name}: {value!r} {expected}"] or (
        len(lines) == 1
        and lines[0].startswith(f"conveyor: cannot start: {name}: {value!r}")
        and expected in lines[0]
    ), out.stderr
    assert "Traceback" not in out.stdout + out.stderr


@pytest.mark.parametrize(("name", "value", "expected"), BAD_SETTINGS)
def test_a_bad_setting_stops_manage_py_in_one_line_with_status_2(tmp_path, name, value, expected):
    env = {**embedded_env(tmp_path), name: value}
    assert_one_line(start(ENTRY_POINTS["manage.py"], env), name, value, expected)


@pytest.mark.parametrize("where", ["a database that does not exist", "a closed port"])
def test_manage_py_that_cannot_connect_to_its_database_says_so_in_one_line(tmp_path, where):
    if where == "a closed port":
        url, expected = f"postgres://conveyor:s3cret-pw@127.0.0.1:{free_port()}/x", "refused"
    else:
        url = urlparse(os.environ["TEST_DATABASE_URL"])._replace(path="/conveyor_no_such_database")
        url = url.geturl()
        expected = 'database "conveyor_no_such_database" does not exist'
    out = start(ENTRY_POINTS["manage.py"], {**embedded_env(tmp_path), "DATABASE_URL": url})
    assert out.returncode == 2, (out.stdout, out.stderr)
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("conveyor: cannot start: DATABASE_URL: cannot connect to the database")
    assert expected in line and "s3cret-pw" not in line
    assert "Traceback" not in out.stdout + out.stderr


def test_an_app_named_in_conveyor_apps_brings_its_tasks(tmp_path):
    app = tmp_path / "code" / "billing"
    app.mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(
        "from celery import shared_task\n"
        "from jobs.task import JobTask\n\n\n"
        "@shared_task(base=JobTask, name='billing.charge')\n"
        "def charge(ctx):\n"
        "    return ctx.payload\n"
    )
    env = {
        **embedded_env(tmp_path),
        "CONVEYOR_APPS": "billing",
        "PYTHONPATH": str(tmp_path / "code"),
    }
    shown = "from project.celery import app; app.loader.import_default_modules(); " + (
        "print(sorted(name for name in app.tasks if name.startswith('billing.')))"
    )
    out = start([PYTHON, "manage.py", "shell", "-c", shown], env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "['billing.charge']"


# gunicorn runs with --preload (scripts/Procfile, docker-compose.yml): the master loads the
# settings before it forks, so a bad one stops it instead of a worker crash-looping.
@pytest.mark.parametrize("entry", ["worker", "beat", "gunicorn"])
def test_a_bad_setting_stops_a_worker_beat_and_gunicorn_in_one_line(tmp_path, entry):
    name, value, expected = BAD_SETTINGS[0]
    out = start(ENTRY_POINTS[entry], {**embedded_env(tmp_path), name: value})
    assert_one_line(out, name, value, expected)


def test_make_run_with_a_bad_setting_prints_one_line_and_starts_nothing(tmp_path):
    env = {**embedded_env(tmp_path), "CONVEYOR_WEBHOOK_TIMEOUT": "abc", "PORT": str(free_port())}
    out = start(["make", "run"], env, timeout=300)
    assert out.returncode == 2
    ours = [line for line in out.stderr.splitlines() if not MAKE_ERROR.match(line)]
    assert ours == [
        "conveyor: cannot start: CONVEYOR_WEBHOOK_TIMEOUT: 'abc' is not a duration "
        "(use seconds or 30s, 5m, 24h, 7d)"
    ], out.stderr
    assert "started" not in out.stdout


def test_make_run_on_a_busy_port_says_so_in_one_line_before_starting_anything(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**embedded_env(tmp_path), "PORT": str(port)}
        out = start(["make", "run"], env, timeout=300)
    assert out.returncode == 2
    ours = [line for line in out.stderr.splitlines() if not MAKE_ERROR.match(line)]
    assert len(ours) == 1 and ours[0].startswith(f"conveyor: cannot start: PORT: {port} is in use")
    assert out.stdout.strip() == ""
    assert not (tmp_path / "var" / "conveyor.sqlite3").exists()  # not even migrate ran


def test_make_run_with_a_port_that_is_no_number_says_so_in_one_line(tmp_path):
    env = {**embedded_env(tmp_path), "PORT": "abc"}
    out = start(["make", "run"], env, timeout=300)
    assert out.returncode == 2
    ours = [line for line in out.stderr.splitlines() if not MAKE_ERROR.match(line)]
    assert ours == ["conveyor: cannot start: PORT: 'abc' is not an integer"], out.stderr
    assert not (tmp_path / "var" / "conveyor.sqlite3").exists()


def test_unknown_conveyor_variables_are_named_in_one_warning(tmp_path):
    env = {**embedded_env(tmp_path), "CONVEYOR_WEBHOK_TIMEOUT": "5s", "CONVEYOR_NOPE": "1"}
    out = start([PYTHON, "manage.py", "check"], env)
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stdout.splitlines() if "settings.unknown_variables" in line]
    assert len(warnings) == 1
    assert '"names": ["CONVEYOR_NOPE", "CONVEYOR_WEBHOK_TIMEOUT"]' in warnings[0]
    known = start([PYTHON, "manage.py", "check"], {**embedded_env(tmp_path)})
    assert "settings.unknown_variables" not in known.stdout  # CONVEYOR_VAR_DIR etc. are known


@pytest.mark.parametrize(
    ("entry", "service", "env"),
    [
        ("beat", "database", {"DATABASE_URL": "postgres://nobody@127.0.0.1:{port}/none"}),
        ("worker", "database", {"DATABASE_URL": "postgres://nobody@127.0.0.1:{port}/none"}),
        (
            "beat",
            "broker",
            {
                # the server's maintenance database: reachable, unlike the broker
                "DATABASE_URL": urlparse(os.environ["DATABASE_URL"])
                ._replace(path="/postgres")
                .geturl(),
                "CELERY_BROKER_URL": "redis://127.0.0.1:{port}/0",
            },
        ),
    ],
)
def test_a_worker_or_beat_that_cannot_reach_a_service_says_which_and_backs_off(
    tmp_path, entry, service, env
):
    port = free_port()
    environ = {**embedded_env(tmp_path), **{k: v.format(port=port) for k, v in env.items()}}
    log = tmp_path / "out.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ENTRY_POINTS[entry], cwd=ROOT, env=environ, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        wait_until(
            lambda: log.read_text().count('"startup.unreachable"') >= 3,
            timeout=30,
            message="three unreachable lines",
        )
        assert process.poll() is None  # still trying, not crashed
        lines = [line for line in log.read_text().splitlines() if "startup.unreachable" in line]
        assert all(f'"service": "{service}"' in line for line in lines)
        assert '"retry_in_seconds": 1.0' in lines[0] and '"retry_in_seconds": 2.0' in lines[1]
        assert "Traceback" not in log.read_text()
    finally:
        process.terminate()
        process.wait(timeout=10)
