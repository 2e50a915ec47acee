"""API tokens: created once and shown once, stored as a hash, checked on every request."""

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from jobs.models import ApiToken, AuditLog, TokenScope

TOKEN_PREFIX = "cvy_"
# last_used_at is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_create(
    *,
    name: str,
    scope: str = TokenScope.READ,
    expires_at: datetime | None = None,
    created_by: str = "",
) -> tuple[ApiToken, str]:
    """Create a token; return it and its secret value, which is never shown again."""
    if scope not in TokenScope.values:
        raise ValueError(f"scope must be one of {', '.join(TokenScope.values)}")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        name=name,
        scope=scope,
        prefix=raw[: len(TOKEN_PREFIX) + 8],
        token_hash=_hash(raw),
        expires_at=expires_at,
        created_by=created_by,
    )
    AuditLog.objects.create(
        actor=created_by or "system",
        action="token.create",
        target_type="api_token",
        target_id=str(token.pk),
        details={"name": name, "scope": scope},
    )
    return token, raw


def token_authenticate(raw: str) -> ApiToken | None:
    """Return the live token whose secret is ``raw``, or None (unknown, revoked or expired)."""
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    now = timezone.now()
    token = (
        ApiToken.objects.filter(token_hash=_hash(raw), revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if token is not None and (
        token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION
    ):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def token_revoke(token: ApiToken, *, actor: str) -> None:
    """Revoke ``token`` at once; requests with it get 401 from now on."""
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    AuditLog.objects.create(
        actor=actor, action="token.revoke", target_type="api_token", target_id=str(token.pk)
    )
