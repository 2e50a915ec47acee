"""Plain Django + Celery, no Conveyor: the alternative a Django team would pick instead.

A minimal project of its own (``bench.baseline_django.settings``), laid out as Celery's
"First steps with Django" lays one out: the Celery app in ``celery.py``, configured from the
``CELERY_*`` settings, and a ``@shared_task`` no-op in ``tasks.py`` found by autodiscovery.
``celery -A bench.baseline_django worker --queues plain_django`` runs it
(``bench.baselines`` starts it as Conveyor's worker is started).
"""

from bench.baseline_django.celery import app as celery_app

__all__ = ("celery_app",)
