"""Make one delivery attempt, record it, and decide what the answer means.

The decision is made by ``classify()`` alone:

========================================  ==========  ==========================================
Answer                                    Outcome     What happens next
========================================  ==========  ==========================================
2xx                                       delivered   delivery ``delivered``
410 Gone                                  gone        endpoint disabled, delivery ``dead``
408, 425, 429, 5xx, no answer, timeout    retry       Celery autoretry (backoff, ``Retry-After``)
any other status (3xx, 4xx)               failed      ``Permanent``: delivery ``dead`` at once
URL refused by the SSRF guard             refused     ``Permanent``: delivery ``dead`` at once
========================================  ==========  ==========================================
"""

import email.utils
import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jobs.attempts import storable
from jobs.models import Job
from webhooks import conf, ssrf, statements, transport
from webhooks.errors import UnsafeURL
from webhooks.models import (
    AttemptOutcome,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    DisabledBy,
    Endpoint,
)
from webhooks.selectors import Outgoing, outgoing_get
from webhooks.services import endpoint_disable_automatically
from webhooks.signing import active_secrets, signature_headers
from webhooks.topics import TEST_TOPIC
from webhooks.transitions import delivery_move, delivery_move_row

logger = logging.getLogger("webhooks")
Outcome = AttemptOutcome
S = DeliveryStatus
RETRY_STATUSES = frozenset({408, 425, 429})
# A delivered attempt resets the endpoint's count of dead deliveries, writing only if needed.
RESET_GUARD = "consecutive_dead > 0"


@dataclass(frozen=True)
class AttemptResult:
    outcome: AttemptOutcome
    error: str = ""
    status_code: int | None = None
    retry_after: float | None = None


def classify(status: int) -> AttemptOutcome:
    """Decide what an HTTP status means for a delivery."""
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status == 410:
        return Outcome.GONE
    if status in RETRY_STATUSES or status >= 500:
        return Outcome.RETRY
    return Outcome.FAILED


def parse_retry_after(value: str | None, *, now: datetime, cap: float) -> float | None:
    """Return the delay a ``Retry-After`` header asks for (seconds or HTTP-date), capped."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = (when - now).total_seconds()
    return min(max(0.0, seconds), cap)


def delivery_attempt(delivery_id: int, *, job: Job) -> AttemptResult:
    """Send a pending delivery once and record the attempt; the caller acts on the result.

    A delivery that is no longer pending is left alone; one whose endpoint was disabled
    meanwhile is marked ``skipped`` (test deliveries are sent regardless).
    """
    outgoing = outgoing_get(delivery_id=delivery_id)
    if outgoing is None or outgoing.status != S.PENDING:
        return AttemptResult(outcome=Outcome.SKIPPED, error="delivery is not pending")
    if not outgoing.enabled and outgoing.topic != TEST_TOPIC:
        delivery_move(Q(pk=delivery_id), S.SKIPPED, from_=[S.PENDING])
        return AttemptResult(outcome=Outcome.SKIPPED, error="endpoint is disabled")
    started = timezone.now()
    result, response, address = _send(outgoing, started)
    _record(outgoing, job=job, started=started, result=result, response=response, address=address)
    logger.info(
        "webhook.attempt",
        extra={
            "delivery_id": delivery_id,
            "endpoint_id": outgoing.endpoint_id,
            "job_id": job.pk,
            "attempt": job.attempts,
            "outcome": str(result.outcome),
            "status_code": result.status_code,
            "latency_ms": response.latency_ms if response else None,
            "error": result.error[:300],
        },
    )
    return result


def _send(outgoing: Outgoing, started: datetime):
    """POST the event to the endpoint; return (result, response or None, address or None)."""
    settings = conf.get()
    body = outgoing.body.encode()
    headers = signature_headers(
        active_secrets(outgoing, started),
        message_id=outgoing.message_id,
        topic=outgoing.topic,
        timestamp=int(started.timestamp()),
        body=body,
    )
    try:
        target, address = ssrf.guard(outgoing.url)
    except UnsafeURL as exc:
        return AttemptResult(outcome=Outcome.REFUSED, error=str(exc)), None, None
    except (OSError, UnicodeError) as exc:  # DNS failures are usually temporary
        return (
            AttemptResult(outcome=Outcome.RETRY, error=f"could not resolve host: {exc}"),
            None,
            None,
        )
    try:
        response = transport.post(
            target,
            address,
            body=body,
            headers=headers,
            timeout=settings.timeout,
            excerpt_bytes=conf.RESPONSE_EXCERPT_BYTES,
        )
    except transport.TransportError as exc:
        prefix = "timed out" if exc.timed_out else "no answer"
        return AttemptResult(outcome=Outcome.RETRY, error=f"{prefix}: {exc}"), None, address
    outcome = classify(response.status)
    result = AttemptResult(
        outcome=outcome,
        status_code=response.status,
        error="" if outcome == Outcome.DELIVERED else _status_error(response),
        retry_after=parse_retry_after(
            _header(response.headers, "retry-after"), now=started, cap=settings.retry_after_max
        )
        if outcome == Outcome.RETRY
        else None,
    )
    return result, response, address


def _header(headers: dict[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _status_error(response: transport.Response) -> str:
    error = f"HTTP {response.status}"
    if 300 <= response.status < 400:
        location = _header(response.headers, "location") or "?"
        error += f": redirect to {location} not followed"
    elif response.status == 410:
        error += ": the receiver says the endpoint is gone"
    return error


def _record(outgoing: Outgoing, *, job: Job, started, result, response, address) -> None:
    """Write the attempt row and bring the delivery (and endpoint) up to date, atomically.

    One statement on PostgreSQL (``webhooks.statements``): with the job's claim, the read of
    the delivery and the job's completion, a delivery costs four round trips. The delivery
    row is the main statement, so it is locked before the endpoint row, in the order
    ``delivery_mark_dead()`` locks them.
    """
    now = timezone.now()
    attempt = DeliveryAttempt(
        delivery_id=outgoing.delivery_id,
        job_id=job.pk,
        number=job.attempts,
        started_at=started,
        address=str(address) if address is not None else None,
        status_code=result.status_code,
        latency_ms=response.latency_ms if response else None,
        response_body=storable(response.body.decode("utf-8", "replace")) if response else "",
        error=result.error,
        outcome=result.outcome,
    )
    last = {
        "last_status_code": result.status_code,
        "last_error": result.error,
        "last_attempt_at": now,
    }
    writes = [statements.insert(attempt)]
    if result.outcome == Outcome.DELIVERED:
        if outgoing.topic != TEST_TOPIC:
            reset = {"consecutive_dead": 0}
            writes.append(
                statements.update_row(Endpoint, outgoing.endpoint_id, reset, guard=RESET_GUARD)
            )
        writes.append(
            delivery_move_row(
                outgoing.delivery_id, S.DELIVERED, from_=[S.PENDING], delivered_at=now, **last
            )
        )
    else:
        writes.append(
            statements.update_row(Delivery, outgoing.delivery_id, {"updated_at": now, **last})
        )
    if result.outcome != Outcome.GONE:
        statements.execute_together(writes)
        return
    with transaction.atomic():
        statements.execute_together(writes)
        endpoint_disable_automatically(
            outgoing.endpoint_id,
            by=DisabledBy.GONE,
            reason=f"the receiver answered 410 Gone to delivery {outgoing.delivery_id} at "
            f"{now.isoformat(timespec='seconds')}",
        )
