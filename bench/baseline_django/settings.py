"""Settings of the plain Django + Celery baseline: Django's defaults, Conveyor's Celery ones.

No Conveyor app is installed. The Celery settings are those Conveyor's worker runs with
(acks late, prefetch 1, JSON, no result backend), and Celery's two log lines per task are off
as in Conveyor's LOGGING. ``CELERY_DB_REUSE_MAX`` is left unset, as a new project leaves it:
the no-op opens no database connection, so Celery's close-around-every-task costs nothing.
The broker (``CELERY_BROKER_URL``) is a Redis database no other worker reads.
"""

import os

import dj_database_url

SECRET_KEY = "bench-only, never served"
DEBUG = False
ALLOWED_HOSTS: list[str] = []
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "bench.baseline_django",
]
DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_WORKER_SEND_TASK_EVENTS = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
    },
}
