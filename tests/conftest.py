"""Shared fixtures: real Celery workers on the real test database and Redis."""

import os
from urllib.parse import urlparse

import pytest
from django.conf import settings

import tests.jobtasks  # noqa: F401 - registers the test tasks in this process too
from deployments.models import Pipeline, Project, Step
from tests.processes import Beat, Worker

ALL_QUEUES = "default,deployments,webhooks,maintenance"


def _test_database_url() -> str:
    """The URL of the database pytest-django created (``test_<name>``) for subprocesses."""
    base = urlparse(os.environ["DATABASE_URL"])
    return base._replace(path=f"/{settings.DATABASES['default']['NAME']}").geturl()


@pytest.fixture(autouse=True)
def _no_run_tracked_past_its_test():
    """A test that runs a job in this process and leaves it tracked (a lost run, a failed
    assertion) would have this process's lease keeper renew it during later tests."""
    yield
    from jobs import lease

    keeper = lease._keeper["keeper"]
    if keeper is not None:
        with keeper.lock:
            keeper.runs.clear()


@pytest.fixture
def worker_env(transactional_db, tmp_path) -> dict:
    """Environment for a subprocess that must see the same database and broker as the test."""
    env = dict(os.environ)
    env.update(
        DATABASE_URL=_test_database_url(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        CONVEYOR_VAR_DIR=str(tmp_path / "var"),
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def purge_broker():
    """Drop every message waiting in Conveyor's queues, so no test sees another's."""
    from project.celery import QUEUES, app

    def purge() -> None:
        with app.connection_for_write() as conn:
            channel = conn.default_channel
            for queue in app.conf.task_queues:  # declared first: a fresh RabbitMQ vhost has none
                queue(channel).declare()
            for queue in QUEUES:
                channel.queue_purge(queue)
            client = getattr(channel, "client", None)
            if client is not None:
                # Deployer hosts' own queues (deployments.host.<host>) are lists named so.
                for key in client.keys("deployments.host.*"):
                    client.delete(key)
                # Redis keeps unacknowledged and delayed messages aside
                client.delete("unacked", "unacked_index", "unacked_mutex")

    purge()
    return purge


@pytest.fixture
def start_worker(worker_env, purge_broker):
    """Start real ``celery worker`` processes; all are stopped when the test ends."""
    started: list[Worker] = []

    def start(
        *, queues: str = ALL_QUEUES, concurrency: int = 2, env: dict | None = None, **kwargs
    ) -> Worker:
        worker = Worker(
            {**worker_env, **(env or {})}, queues=queues, concurrency=concurrency, **kwargs
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


# Fast two-phase stops and short waits keep the suite quick; semantics are unchanged.
WORKER_ENV = {"CONVEYOR_STOP_GRACE": "2s", "CONVEYOR_DEPLOYMENT_WAIT": "1s"}


@pytest.fixture
def make_project(transactional_db):
    """Create a project whose pipelines are given as ``{name: [step fields, ...]}``."""

    def make(slug: str = "app", *, pipelines: dict | None = None, **fields) -> Project:
        project = Project.objects.create(slug=slug, name=slug.title(), **fields)
        pipelines = pipelines or {"default": [{"name": "hello", "command": "echo hello"}]}
        for name, steps in pipelines.items():
            set_steps(Pipeline.objects.create(project=project, name=name), steps)
        return project

    return make


def set_steps(pipeline: Pipeline, steps: list[dict]) -> None:
    pipeline.steps.all().delete()
    for position, step in enumerate(steps, start=1):
        Step.objects.create(pipeline=pipeline, position=position, **step)


@pytest.fixture
def deploy_worker(start_worker):
    """Start a worker on the ``deployments`` queue only (concurrency 1 unless told)."""

    def start(*, concurrency: int = 1, env: dict | None = None, **kwargs):
        return start_worker(
            queues="deployments",
            concurrency=concurrency,
            env={**WORKER_ENV, **(env or {})},
            **kwargs,
        )

    return start


@pytest.fixture
def start_beat(worker_env):
    """Start real ``celery beat`` processes on the test database; stop them after the test."""
    started: list[Beat] = []

    def start(env: dict | None = None) -> Beat:
        beat = Beat({**worker_env, **(env or {})})
        started.append(beat)
        return beat

    yield start
    for beat in started:
        beat.stop()
