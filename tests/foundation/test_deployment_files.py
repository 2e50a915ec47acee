"""docker-compose.yml describes the production deployment; Docker cannot run here, so parse it."""

import subprocess

import yaml

from tests.processes import ROOT


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_every_service_with_a_healthcheck():
    services = compose()["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    for name in ("postgres", "redis", "web", "worker", "beat"):
        assert "healthcheck" in services[name], name


def test_compose_wires_the_app_to_postgres_and_redis():
    services = compose()["services"]
    for name in ("web", "worker", "beat"):
        env = services[name]["environment"]
        assert (
            env["DATABASE_URL"].startswith("postgres://")
            and "@postgres:5432/" in env["DATABASE_URL"]
        )
        assert env["CELERY_BROKER_URL"].startswith("redis://redis:6379")
        assert (
            services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        )
    assert "postgres-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]


def test_compose_commands_start_gunicorn_all_queues_and_one_beat():
    services = compose()["services"]
    assert services["web"]["command"][0] == "gunicorn"
    from project.celery import QUEUES

    # The worker takes every declared queue but those the deployer and webhooks pools take.
    worker = services["worker"]["command"]
    assert worker[:4] == ["celery", "-A", "project", "worker"]
    excluded = set(worker[worker.index("--exclude-queues") + 1].split(","))
    deployer = services["deployer"]["command"]
    assert deployer[deployer.index("--queues") + 1] == "deployments"
    webhooks = " ".join(services["webhooks"]["command"])
    assert "--queues webhooks --pool threads" in webhooks
    assert "CONVEYOR_WEBHOOK_CONCURRENCY" in webhooks
    assert excluded == {"deployments", "webhooks"} and set(QUEUES) - excluded == {
        "default",
        "maintenance",
    }
    assert services["beat"]["command"][3] == "beat"
    assert services["beat"]["deploy"]["replicas"] == 1
    dockerfile = services["web"]["build"]["dockerfile"]
    assert (ROOT / dockerfile).exists()


def test_the_test_runner_fails_on_a_failing_test_and_on_no_tests(tmp_path):
    failing = tmp_path / "test_red.py"
    failing.write_text("def test_red():\n    assert 1 == 2\n")
    empty = tmp_path / "empty"
    empty.mkdir()

    def run(target):
        return subprocess.run(
            [str(ROOT / "scripts/run-tests"), str(target), "-p", "no:cacheprovider", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    red = run(failing)
    assert red.returncode == 1 and "1 failed" in red.stdout, red.stdout
    none = run(empty)
    assert none.returncode == 1 and "collected no tests" in none.stderr, none.stderr
    assert "make test" in (ROOT / ".ci/run").read_text()
