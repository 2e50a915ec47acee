"""The Celery application: configuration comes from Django settings (``CELERY_*``)."""

import os

from celery import Celery, signals
from kombu import Queue

from project import startup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("conveyor")
app.config_from_object("django.conf:settings", namespace="CELERY")

QUEUES = ("default", "deployments", "webhooks", "maintenance")
# Queues named at run time: each deployer host consumes its own ``deployments.host.<host>``
# (deployments.deployers adds it when the worker starts). Jobs and settings may name them.
QUEUE_FAMILIES = ("deployments.host.",)


def is_declared(name: str) -> bool:
    """Return whether ``name`` is a declared queue or one of a declared family."""
    return name in QUEUES + django_task_queues() or (
        name.startswith(QUEUE_FAMILIES) and not name.endswith(".")
    )


def django_task_queues() -> tuple[str, ...]:
    """The queues that ``TASKS`` entries on Conveyor's backend declare beyond Conveyor's own.

    The ``worker`` process consumes every declared queue but ``deployments`` and ``webhooks``
    (``--exclude-queues``), so a queue added to ``TASKS[...]["QUEUES"]`` needs no new flag.
    """
    from django.conf import settings

    names = []
    for config in settings.TASKS.values():
        if config.get("BACKEND") == "jobs.backends.ConveyorBackend":
            names += config.get("QUEUES") or []
    return tuple(name for name in dict.fromkeys(names) if name not in QUEUES)


@app.on_after_configure.connect
def _declare_queues(sender, **kwargs) -> None:
    """Conveyor's queues and those TASKS declares: read once the settings have loaded."""
    sender.conf.task_queues = [Queue(name) for name in QUEUES + django_task_queues()]


app.conf.task_routes = {
    "deployments.*": {"queue": "deployments"},
    "webhooks.*": {"queue": "webhooks"},
    "maintenance.*": {"queue": "maintenance"},
}
app.autodiscover_tasks()

# Under the ``celery`` command, load and validate the settings now, before Celery reads them:
# a bad one is then one line and exit status 2, and a worker or beat waits for its database.
_command = startup.started_by_celery()
if _command is not None:
    startup.celery_setup(_command)


@signals.setup_logging.connect
def _use_django_logging(**kwargs) -> None:
    """Let Django's LOGGING (one JSON object per line) format Celery's own records too."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
