"""``Idempotency-Key`` for POST requests (IETF draft semantics), keyed per token and path.

Keys belong to the token that sent them (as Stripe's belong to an API key): two tokens
never see each other's keys, even on one project, and ``token_scoped`` gives what a
service stores beside the object it made (a deployment's ``idempotency_key``).

* first request with a key: runs, and its 2xx answer is stored;
* same key, same body: the stored answer again, marked ``Idempotent-Replayed: true``;
* same key, other body: 422; same key while the first is still running: 409.

Keys are kept for 24 hours (purge removes them); a request that failed leaves no key behind,
so the client may try again with it.
"""

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from project.access.models import ApiToken, IdempotencyKey
from project.constraints import violates

KEY_RETENTION = timedelta(hours=24)
# An in-flight record older than this belongs to a request that died; it may be taken over.
ABANDONED_AFTER = timedelta(minutes=2)
MAX_KEY_LENGTH = 200


class IdempotencyConflict(Exception):
    """The key is in use: ``status`` is 409 (in flight) or 422 (another body)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def fingerprint(body: bytes) -> str:
    """Hash the request body, ignoring JSON whitespace and key order."""
    try:
        canonical = json.dumps(
            json.loads(body or b"null"), sort_keys=True, separators=(",", ":")
        ).encode()
    except ValueError:
        canonical = body
    return hashlib.sha256(canonical).hexdigest()


def token_scoped(token: ApiToken, key: str | None) -> str | None:
    """Return ``key`` as stored beside what it made: prefixed with its token, so per token."""
    if key is None:
        return None
    scoped = f"{token.pk}:{key}"
    if len(scoped) <= MAX_KEY_LENGTH:
        return scoped
    return f"{token.pk}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"


def run_once(
    *, token: ApiToken, key: str, path: str, body: bytes, handler: Callable[[], tuple[int, dict]]
) -> tuple[int, dict, bool]:
    """Run ``handler`` at most once per (token, path, key); return (status, body, replayed)."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise IdempotencyConflict(400, f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} characters")
    digest = fingerprint(body)
    record = _reserve(token=token, key=key, path=path, digest=digest)
    if record.status_code is not None:
        return record.status_code, record.response, True
    try:
        status, response = handler()
    except BaseException:
        IdempotencyKey.objects.filter(pk=record.pk).delete()
        raise
    if 200 <= status < 300:
        IdempotencyKey.objects.filter(pk=record.pk).update(status_code=status, response=response)
    else:
        IdempotencyKey.objects.filter(pk=record.pk).delete()
    return status, response, False


def _reserve(*, token: ApiToken, key: str, path: str, digest: str) -> IdempotencyKey:
    """Insert the in-flight record, or return the finished one this key already has."""
    now = timezone.now()
    for _ in range(3):
        try:
            with transaction.atomic():
                return IdempotencyKey.objects.create(
                    token=token, key=key, path=path, fingerprint=digest
                )
        except IntegrityError as exc:
            if not violates(exc, IdempotencyKey, "idempotency_key_unique"):
                raise
            existing = IdempotencyKey.objects.filter(token=token, key=key, path=path).first()
        if existing is None:
            continue  # deleted meanwhile: try the insert again
        if existing.created_at < now - KEY_RETENTION or (
            existing.in_flight and existing.created_at < now - ABANDONED_AFTER
        ):
            IdempotencyKey.objects.filter(pk=existing.pk, created_at=existing.created_at).delete()
            continue
        if existing.fingerprint != digest:
            raise IdempotencyConflict(
                422, "this Idempotency-Key was used with a different request body"
            )
        if existing.in_flight:
            raise IdempotencyConflict(
                409, "a request with this Idempotency-Key is still in progress"
            )
        return existing
    raise IdempotencyConflict(409, "this Idempotency-Key is contended; retry shortly")
