"""Settings come from the environment; with none, Conveyor runs embedded."""

import json
import os
import subprocess
import sys

from tests.processes import ROOT

PROBE = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({'engine': s.DATABASES['default']['ENGINE'], "
    "'name': str(s.DATABASES['default']['NAME']), 'broker': s.CELERY_BROKER_URL, "
    "'lease': s.CONVEYOR_JOB_LEASE_TIMEOUT.total_seconds(), 'journal': "
    "s.DATABASES['default'].get('OPTIONS', {}).get('init_command', '')}))"
)


def probe(tmp_path, **env) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_", "CELERY_", "CONVEYOR_"))
    }
    clean.update(DJANGO_SETTINGS_MODULE="project.settings", CONVEYOR_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_environment_means_sqlite_and_the_filesystem_broker(tmp_path):
    out = probe(tmp_path)
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    assert config["engine"] == "django.db.backends.sqlite3"
    assert config["name"] == str(tmp_path / "conveyor.sqlite3")
    assert config["broker"] == "filesystem://"
    assert "journal_mode=WAL" in config["journal"]
    assert config["lease"] == 300


def test_the_environment_selects_postgresql_and_redis(tmp_path):
    out = probe(
        tmp_path,
        DATABASE_URL="postgres://u@db.example:5433/prod",
        CELERY_BROKER_URL="redis://cache:6379/2",
        CONVEYOR_JOB_LEASE_TIMEOUT="90s",
    )
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    assert config["engine"] == "django.db.backends.postgresql"
    assert config["name"] == "prod"
    assert config["broker"] == "redis://cache:6379/2"
    assert config["lease"] == 90


def test_a_bad_database_url_fails_with_a_clear_error(tmp_path):
    out = probe(tmp_path, DATABASE_URL="notadb://whatever")
    assert out.returncode != 0
    assert "DATABASE_URL: 'notadb://whatever' is not a usable database URL" in out.stderr


def test_a_bad_duration_names_the_variable(tmp_path):
    out = probe(tmp_path, CONVEYOR_SWEEPER_GRACE="soon")
    assert out.returncode != 0
    assert "CONVEYOR_SWEEPER_GRACE: 'soon' is not a duration" in out.stderr


def test_durations_accept_seconds_and_units():
    from datetime import timedelta

    from project.env import parse_duration

    assert parse_duration("45") == timedelta(seconds=45)
    assert parse_duration("30s") == timedelta(seconds=30)
    assert parse_duration("5m") == timedelta(minutes=5)
    assert parse_duration("24h") == timedelta(hours=24)
    assert parse_duration("7d") == timedelta(days=7)
