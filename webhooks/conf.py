"""The webhooks app's settings, typed, with their defaults; validated at start-up.

=====================================  =======  ==============================================
Setting                                Default  Meaning
=====================================  =======  ==============================================
``CONVEYOR_WEBHOOKS_ENABLED``          true     false: notify() writes in-app notices only
``CONVEYOR_WEBHOOK_TIMEOUT``           10s      connect and read timeout of one attempt
``CONVEYOR_WEBHOOK_MAX_ATTEMPTS``      6        attempts per delivery job (first try + retries)
``CONVEYOR_WEBHOOK_DISABLE_AFTER``     10       consecutive dead deliveries that disable it
``CONVEYOR_WEBHOOKS_ALLOW_PRIVATE``    false    true: skip the SSRF address check entirely
``CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS`` (empty)  comma-separated CIDRs allowed although private
``CONVEYOR_WEBHOOK_BACKOFF``           30s      retry n waits up to backoff × 2^(n-1) (jitter)
``CONVEYOR_WEBHOOK_BACKOFF_MAX``       15m      cap on one backoff delay
``CONVEYOR_WEBHOOK_RETRY_AFTER_MAX``   15m      cap on a receiver's ``Retry-After``
``CONVEYOR_WEBHOOK_RETENTION``         30d      finished deliveries and old events kept this long
``CONVEYOR_WEBHOOK_CONCURRENCY``       32       threads of the ``webhooks`` worker (its pool)
``…_ENDPOINT_CONCURRENCY``             pool/2   deliveries in flight per endpoint, everywhere
``…_ENDPOINT_RATE``                    (none)   deliveries started per endpoint (``50/s``)
=====================================  =======  ==============================================

(``…`` stands for ``CONVEYOR_WEBHOOK``.) The per-endpoint limits are a jobs.limits.Limit on
the deliver task, keyed by the endpoint: a delivery held back waits without spending an
attempt and starts as soon as its endpoint has room.
"""

import ipaddress
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from jobs.limits import parse_rate
from project.env import at_least

# How long a rotated-out secret keeps signing deliveries next to the new one.
SECRET_OVERLAP = timedelta(hours=24)
# How much of a receiver's response body an attempt keeps.
RESPONSE_EXCERPT_BYTES = 4096
# A shorter retention would purge dead deliveries before an operator could replay them.
MIN_RETENTION = timedelta(hours=1)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class WebhookSettings:
    enabled: bool
    timeout: float
    max_attempts: int
    disable_after: int
    allow_private: bool
    allowed_networks: tuple[Network, ...]
    backoff: int
    backoff_max: int
    retry_after_max: int
    retention: timedelta
    concurrency: int
    endpoint_concurrency: int
    endpoint_rate: str | None


def parse_networks(raw: str) -> tuple[Network, ...]:
    """Parse a comma-separated list of CIDRs (``"10.0.0.0/8, 127.0.0.1/32"``)."""
    networks = []
    for item in raw.split(","):
        if item.strip():
            try:
                networks.append(ipaddress.ip_network(item.strip(), strict=False))
            except ValueError as exc:
                raise ImproperlyConfigured(f"CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS: {exc}") from None
    return tuple(networks)


def _rate(name: str) -> str | None:
    """A rate setting (``50/s``), or None when empty; ImproperlyConfigured naming it if bad."""
    raw = getattr(settings, name).strip()
    if not raw:
        return None
    try:
        parse_rate(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None
    return raw


def get() -> WebhookSettings:
    """Return the settings in force (read each call so tests can override them)."""
    return WebhookSettings(
        enabled=settings.CONVEYOR_WEBHOOKS_ENABLED,
        timeout=settings.CONVEYOR_WEBHOOK_TIMEOUT.total_seconds(),
        max_attempts=settings.CONVEYOR_WEBHOOK_MAX_ATTEMPTS,
        disable_after=settings.CONVEYOR_WEBHOOK_DISABLE_AFTER,
        allow_private=settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE,
        allowed_networks=parse_networks(settings.CONVEYOR_WEBHOOKS_ALLOWED_NETWORKS),
        backoff=int(settings.CONVEYOR_WEBHOOK_BACKOFF.total_seconds()),
        backoff_max=int(settings.CONVEYOR_WEBHOOK_BACKOFF_MAX.total_seconds()),
        retry_after_max=int(settings.CONVEYOR_WEBHOOK_RETRY_AFTER_MAX.total_seconds()),
        retention=settings.CONVEYOR_WEBHOOK_RETENTION,
        concurrency=settings.CONVEYOR_WEBHOOK_CONCURRENCY,
        endpoint_concurrency=settings.CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY,
        endpoint_rate=_rate("CONVEYOR_WEBHOOK_ENDPOINT_RATE"),
    )


def validate() -> None:
    """Fail loudly at start-up on settings that cannot work."""
    conf = get()
    if conf.timeout <= 0:
        raise ImproperlyConfigured("CONVEYOR_WEBHOOK_TIMEOUT must be above zero")
    if conf.backoff < 1:
        raise ImproperlyConfigured("CONVEYOR_WEBHOOK_BACKOFF must be at least 1s")
    at_least("CONVEYOR_WEBHOOK_RETENTION", conf.retention, MIN_RETENTION)
    # Principle 4: a delay held by a worker must stay below the broker's redelivery horizon.
    ceiling = int(settings.CONVEYOR_RETRY_BACKOFF_MAX.total_seconds())
    for name, value in (
        ("CONVEYOR_WEBHOOK_BACKOFF_MAX", conf.backoff_max),
        ("CONVEYOR_WEBHOOK_RETRY_AFTER_MAX", conf.retry_after_max),
    ):
        if not 1 <= value <= ceiling:
            raise ImproperlyConfigured(f"{name} must be between 1s and {ceiling}s")
