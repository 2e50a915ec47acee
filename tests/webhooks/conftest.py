"""Fixtures for the webhooks tests: a real receiver, staff users, a webhooks worker."""

import hashlib
import hmac

import pytest
from standardwebhooks import Webhook

from tests.webhooks.receiver import Receiver

# Short timeouts and backoff so that retries take seconds, not minutes.
WORKER_ENV = {
    "CONVEYOR_WEBHOOKS_ALLOW_PRIVATE": "true",
    "CONVEYOR_WEBHOOK_TIMEOUT": "1s",
    "CONVEYOR_WEBHOOK_BACKOFF": "1s",
    "CONVEYOR_WEBHOOK_BACKOFF_MAX": "1s",
    "CONVEYOR_WEBHOOK_RETRY_AFTER_MAX": "3s",
}


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def allow_private(settings):
    """Let the test process save endpoints that point at the loopback receiver."""
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True
    return settings


@pytest.fixture
def staff(django_user_model):
    """Two active staff users, one inactive staff user and one ordinary user."""
    make = django_user_model.objects.create_user
    active = [make(f"staff{i}", is_staff=True) for i in range(2)]
    make("retired", is_staff=True, is_active=False)
    make("someone")
    return active


@pytest.fixture
def webhook_worker(start_worker):
    """Start a worker on the ``webhooks`` (and ``default``) queues with test timings."""

    def start(concurrency: int = 2, **env):
        return start_worker(
            queues="webhooks,default",
            concurrency=concurrency,
            env={**WORKER_ENV, **{key: str(value) for key, value in env.items()}},
        )

    return start


def seed_verify(secret: str, headers: dict, body: bytes) -> bool:
    """Seed 003's receiver verify(), with Conveyor's header names (no timestamp window)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    ts = lowered["x-conveyor-timestamp"]
    sig = lowered["x-conveyor-signature"]
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256)
    expected = f"sha256={mac.hexdigest()}"
    return hmac.compare_digest(expected, sig)


def verify_both(secret: str, request) -> dict:
    """Verify a received delivery with standardwebhooks and with seed 003's recipe."""
    payload = Webhook(secret).verify(request.body, request.headers)
    assert seed_verify(secret, request.headers, request.body), "X-Conveyor-Signature mismatch"
    return payload
