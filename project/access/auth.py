"""Bearer-token authentication and scope checks for the REST API."""

from django.contrib.auth import authenticate
from ninja.security import HttpBearer

from project.access.models import ApiToken, TokenScope
from project.access.permissions import PERMISSIONS, allowed
from project.access.tokens import token_authenticate


class BearerToken(HttpBearer):
    """Authenticate ``Authorization: Bearer <token>``; ``request.auth`` becomes the ApiToken."""

    def authenticate(self, request, token: str) -> ApiToken | None:
        return verify_bearer(request, token)


def verify_bearer(request, raw: str) -> ApiToken | None:
    """Return the live token ``raw`` names, or None after counting a failure for the client.

    A token that verifies is accepted whatever else failed from the same address: the
    lockout (project.throttling) applies only to tokens that do not verify, so nobody can
    aim it at a valid token by sending bad ones from its address. A failure goes through
    Django's ``authenticate()``, where django-axes counts it and refuses (429) a locked-out
    client.
    """
    token = token_authenticate(raw)
    if token is not None:
        return token
    authenticate(request, api_token=raw)
    return None


class ApiTokenBackend:
    """The Django authentication backend that checks API tokens (never logs a user in)."""

    def authenticate(self, request, api_token: str | None = None, **kwargs) -> ApiToken | None:
        if api_token is None:
            return None
        return token_authenticate(api_token)

    def get_user(self, user_id):
        return None


def require_scope(request, scope: TokenScope, *, action: str | None = None) -> ApiToken:
    """Return the request's token if it carries ``scope``, else answer 403.

    With ``action`` (a key of project.access.permissions.PERMISSIONS), a token that acts for a
    person also needs that person to hold the action's permission, as the console asks of
    them: a person's token never does more than the person may.
    """
    from project.api_errors import ApiError

    token: ApiToken = request.auth
    if not token.allows(scope):
        raise ApiError(
            403,
            "forbidden",
            f"this token's scope ({token.scope}) does not allow this; needs {scope}",
        )
    if action is not None and token.user_id is not None and not allowed(token.user, action):
        raise ApiError(
            403,
            "forbidden",
            f"{token.user.get_username()} lacks the {PERMISSIONS[action]} permission",
        )
    return token


def actor(request) -> str:
    """Name the caller for the audit log: ``token:<name>``, or ``<user> via token:<name>``."""
    return token_actor(request.auth)


def token_actor(token: ApiToken) -> str:
    """Name a token's caller: its person (if it has one) and the token."""
    if token.user_id is None:
        return f"token:{token.name}"
    return f"{token.user.get_username()} via token:{token.name}"


def acting_user(request):
    """Return the person the request's token acts for, or None."""
    return request.auth.user if request.auth.user_id is not None else None
