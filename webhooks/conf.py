"""The webhooks app's settings, typed; validated at start-up.

Each ``CONVEYOR_WEBHOOK…`` setting is declared once, with its default and purpose, in
project/settings_registry.py (listed in docs/configuration.md, Webhooks); ``get`` reads the
ones in force, again after any change (``override_settings``), never fixed at import.

The per-endpoint limits are a jobs.limits.Limit on
the deliver task, keyed by the endpoint: a delivery held back waits without spending an
attempt and starts as soon as its endpoint has room.
"""

import ipaddress
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from jobs.limits import Limit, parse_rate
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


@cache
def get() -> WebhookSettings:
    """Return the settings in force (read once, and again after a change of settings)."""
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


@cache
def delivery_limit() -> Limit:
    """The deliver task's per-endpoint Limit under the settings in force."""
    conf = get()
    return Limit(
        key=("endpoint_id",),
        key_concurrency=conf.endpoint_concurrency,
        key_rate=conf.endpoint_rate,
    )


@receiver(setting_changed)
def _forget(**kwargs) -> None:
    """Read them again after a change (override_settings in tests)."""
    get.cache_clear()
    delivery_limit.cache_clear()


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
