"""The Celery application: configuration comes from Django settings (``CELERY_*``)."""

import os

from celery import Celery, signals
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

app = Celery("conveyor")
app.config_from_object("django.conf:settings", namespace="CELERY")

QUEUES = ("default", "deployments", "webhooks", "maintenance")
app.conf.task_queues = [Queue(name) for name in QUEUES]
app.conf.task_routes = {
    "deployments.*": {"queue": "deployments"},
    "webhooks.*": {"queue": "webhooks"},
    "maintenance.*": {"queue": "maintenance"},
}
app.autodiscover_tasks()


@signals.setup_logging.connect
def _use_django_logging(**kwargs) -> None:
    """Let Django's LOGGING (one JSON object per line) format Celery's own records too."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
