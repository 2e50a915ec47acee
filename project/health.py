"""``GET /healthz``: is the database answering, and can we reach the broker?"""

import logging

from django.db import DatabaseError, connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from jobs.publish import broker_errors
from project.celery import app

logger = logging.getLogger(__name__)


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except DatabaseError as exc:
        logger.warning("health.database_failed", extra={"error": str(exc)})
        return f"error: {exc.__class__.__name__}"


def _broker() -> str:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return "ok"
    except broker_errors(app) as exc:
        logger.warning("health.broker_failed", extra={"error": str(exc)})
        return f"error: {exc.__class__.__name__}"


@require_GET
def healthz(request):
    """Answer 200 when the database and broker both respond, else 503 naming the failure."""
    status = {"database": _database(), "broker": _broker()}
    healthy = all(value == "ok" for value in status.values())
    return JsonResponse(status, status=200 if healthy else 503)
