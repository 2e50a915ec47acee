"""The project's Celery app: settings from Django's ``CELERY_*``, tasks autodiscovered."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.baseline_django.settings")

app = Celery("baseline_django")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
