"""Throttle failed authentication: admin passwords and API tokens, one counter per client.

django-axes does the counting. Every failed credential goes through Django's
``authenticate()`` (the admin's login form, and ``project.access.auth.verify_bearer`` for API tokens
via ``ApiTokenBackend``), so axes sees every failure and refuses a client that is locked
out. Its counters are rows in the database (``AccessAttempt``), so every web process on
every host shares them, on PostgreSQL and on the embedded SQLite.

- Admin logins are locked per (username, address) pair after ``CONVEYOR_AUTH_FAILURE_LIMIT``
  failures (10): guesses from other addresses never lock the real person out.
- API tokens (and ``/metrics``) are counted per client address, but the lock applies only
  to tokens that do not verify (``project.access.auth.verify_bearer``): a valid token is never
  refused because others failed from its address; bad ones from there get 429.
- The lock lasts ``CONVEYOR_AUTH_LOCKOUT`` (15m) after the last counted failure; failures
  older than that are forgotten. An attempt refused while locked is not counted, so it
  never extends the lock.
- A locked request gets 429 with ``Retry-After`` (the seconds left of its lock): the API's
  one error shape under /api/, a plain page for the admin. Successful requests cost one
  indexed read and are never delayed.

The client address is ``REMOTE_ADDR``; behind ``CONVEYOR_PROXY_COUNT`` trusted reverse
proxies it is the address those proxies recorded in ``X-Forwarded-For``.
"""

import math

from axes.handlers.database import AxesDatabaseHandler
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.html import escape

API_PREFIX = "/api/"
METRICS_PATH = "/metrics"  # a scraper reads the API's error shape, not an HTML page


def client_address(request) -> str:
    """Return the address failures are counted against (AXES_CLIENT_IP_CALLABLE)."""
    hops = settings.CONVEYOR_PROXY_COUNT
    if hops:
        forwarded = [
            part.strip()
            for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
            if part.strip()
        ]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return request.META.get("REMOTE_ADDR", "")


class SerializedDatabaseHandler(AxesDatabaseHandler):
    """axes' database handler, recording one client's concurrent failures one at a time.

    axes keeps one AccessAttempt row per (username, address, user agent) without a unique
    constraint: parallel first failures each insert one, and every later ``get_or_create``
    fails with MultipleObjectsReturned (a 500 for each guess of a flood). A transaction
    lock per client address makes the read-then-insert one step. (SQLite needs none: its
    transactions take the write lock at BEGIN, see DATABASES.)
    """

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs):
        with transaction.atomic():
            if request is not None and connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))",
                        [f"conveyor.auth-failure:{client_address(request)}"],
                    )
            super().user_login_failed(sender, credentials, request, **kwargs)


def lockout_parameters(request, credentials: dict | None) -> list:
    """Count a failed password by (username, address) pair; a failed token by address."""
    if credentials and credentials.get("username"):
        return [["username", "ip_address"]]
    return ["ip_address"]


def retry_after_seconds(request, credentials: dict | None) -> int:
    """Seconds until the client's lock ends: ``CONVEYOR_AUTH_LOCKOUT`` after the last
    failure that counted (the whole lockout if none is found)."""
    lockout = settings.CONVEYOR_AUTH_LOCKOUT
    last = None
    if hasattr(request, "axes_ip_address"):  # axes' middleware has read the client
        attempts = SerializedDatabaseHandler().get_user_attempts(request, credentials)
        times = [q.aggregate(last=Max("attempt_time"))["last"] for q in attempts]
        last = max((when for when in times if when is not None), default=None)
    if last is None:
        return max(1, math.ceil(lockout.total_seconds()))
    return max(1, math.ceil((last + lockout - timezone.now()).total_seconds()))


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    """Answer a locked-out request: 429 with Retry-After (AXES_LOCKOUT_CALLABLE)."""
    from project.api_errors import error_body

    seconds = retry_after_seconds(request, credentials)
    message = (
        "too many failed authentication attempts; "
        f"try again in {seconds} seconds "
        "(counted per username and address for logins, per address for tokens)"
    )
    if request.path.startswith(API_PREFIX) or request.path == METRICS_PATH:
        response = JsonResponse(
            error_body("too_many_requests", message, {"retry_after": seconds}), status=429
        )
    else:
        response = HttpResponse(
            f"<!doctype html><title>Too many login attempts</title>"
            f"<h1>Too many failed login attempts</h1><p>{escape(message)}.</p>",
            status=429,
        )
    response["Retry-After"] = str(seconds)
    return response
