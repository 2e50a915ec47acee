"""Keep credentials inside repository URLs out of everything Conveyor shows, logs or sends.

A project's ``repo`` may carry userinfo (``https://user:token@host/repo.git``). Every place a
URL or a git error message leaves the process (deployment log and error, workspace fetch
error, ``workspace.sync_failed`` event and staff notification, JSON log lines, the admin)
goes through ``redact_url`` or ``redact_text``, which keep the user name and replace the
password with ``***``. Prefer a credential outside the URL: an SSH deploy key, or a git
credential helper configured for the worker's user (docs/operations.md, "Security").
"""

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
# scheme://user:password@ ... or scheme://token@ (http/https only: ssh's "git@" is a name).
_USER_PASSWORD = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:@]*):[^/\s@]+@"
)
_HTTP_TOKEN = re.compile(r"(?P<scheme>\bhttps?://)[^/\s:@]+@", re.IGNORECASE)


def url_password(url: str) -> str | None:
    """Return the password in ``url``'s userinfo (or an http(s) token user), else None."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.password:
        return parts.password
    if parts.scheme.lower() in ("http", "https") and parts.username:
        return parts.username
    return None


def redact_url(url: str) -> str:
    """Return ``url`` with its password replaced: ``https://user:***@host/...``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if url_password(url) is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:{MASK}" if parts.password else MASK
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


def redact_text(text: str) -> str:
    """Return ``text`` with the password of every URL in it replaced by ``***``."""
    if "@" not in text:
        return text
    text = _USER_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _HTTP_TOKEN.sub(lambda m: f"{m['scheme']}{MASK}@", text)
