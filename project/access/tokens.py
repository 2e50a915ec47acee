"""API tokens: created once and shown once, stored as a hash, checked on every request."""

import hashlib
import secrets
import string
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from jobs.models import AuditLog
from project.access.models import ApiToken, TokenScope

TOKEN_PREFIX = "cvy_"
GRANT_ADMIN_PERMISSION = "access.grant_admin_token"
# last_used_at is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class GrantRefused(PermissionError):
    """The person asking may not give a token this scope (admin needs a permission)."""


def may_grant(granter, scope: str) -> bool:
    """Whether ``granter`` may give a token ``scope``; ``None`` is the operator's shell.

    Admin scope reaches every project, the jobs and the webhooks, so only a user with
    ``access.grant_admin_token`` (superusers have every permission) may hand it out.
    """
    if scope != TokenScope.ADMIN or granter is None:
        return True
    return bool(granter.is_active and granter.has_perm(GRANT_ADMIN_PERMISSION))


def _check_grant(granter, scope: str) -> None:
    if not may_grant(granter, scope):
        raise GrantRefused(
            f"{granter.get_username()} may not give a token admin scope "
            f"(needs the {GRANT_ADMIN_PERMISSION} permission)"
        )


def token_create(
    *,
    name: str,
    scope: str = TokenScope.READ,
    expires_at: datetime | None = None,
    created_by: str = "",
    user=None,
    granted_by=None,
    secret: str | None = None,
) -> tuple[ApiToken, str]:
    """Create a token; return it and its secret value, which is never shown again.

    ``user`` is the person the token acts for (must be active). ``granted_by`` is the user
    creating it from the console (None: the operator's shell); raises GrantRefused when
    they may not give ``scope``. ``secret`` registers a value kept elsewhere instead of a new
    one (the demo token kept in var/, when the database changed); it must be one this
    module made.
    """
    if scope not in TokenScope.values:
        raise ValueError(f"scope must be one of {', '.join(TokenScope.values)}")
    if user is not None and not user.is_active:
        raise ValueError(f"user {user.get_username()} is not active")
    _check_grant(granted_by, scope)
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32) if secret is None else secret
    if not _well_formed(raw):
        raise ValueError("secret is not a token this server makes")
    token = ApiToken.objects.create(
        name=name,
        scope=scope,
        prefix=raw[: len(TOKEN_PREFIX) + 8],
        token_hash=_hash(raw),
        expires_at=expires_at,
        created_by=created_by,
        user=user,
    )
    AuditLog.objects.create(
        actor=created_by or "system",
        action="token.create",
        target_type="api_token",
        target_id=str(token.pk),
        details={"name": name, "scope": scope, "user": user.get_username() if user else None},
    )
    return token, raw


def _well_formed(raw: str) -> bool:
    body = raw[len(TOKEN_PREFIX) :]
    alphabet = set(string.ascii_letters + string.digits + "-_")
    return raw.startswith(TOKEN_PREFIX) and 43 <= len(body) <= 100 and set(body) <= alphabet


def token_known(raw: str) -> bool:
    """Whether this database holds a token (live or not) whose secret is ``raw``."""
    return ApiToken.objects.filter(token_hash=_hash(raw)).exists()


def token_update(token: ApiToken, *, changed_by, **fields) -> ApiToken:
    """Change a token's name, scope or expiry as ``changed_by`` (a console user); audited.

    Raising a token to admin scope needs the same permission as creating one.
    """
    before = ApiToken.objects.get(pk=token.pk)
    if fields.get("scope", before.scope) != before.scope:
        _check_grant(changed_by, fields["scope"])
    changed = {k: v for k, v in fields.items() if getattr(before, k) != v}
    if not changed:
        return before
    ApiToken.objects.filter(pk=token.pk).update(**changed)
    AuditLog.objects.create(
        actor=changed_by.get_username(),
        action="token.change",
        target_type="api_token",
        target_id=str(token.pk),
        details={
            key: {"from": str(getattr(before, key)), "to": str(value)}
            for key, value in changed.items()
        },
    )
    return ApiToken.objects.get(pk=token.pk)


def token_authenticate(raw: str) -> ApiToken | None:
    """Return the live token whose secret is ``raw``, or None.

    None for an unknown, revoked or expired token, and for one whose person is inactive.
    """
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    now = timezone.now()
    # A token of a deactivated person is as dead as a revoked one.
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=_hash(raw), revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .filter(Q(user__isnull=True) | Q(user__is_active=True))
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
