"""webhooks.transport against a real loopback receiver: keep-alive connections are kept for
every delivery one endpoint may have in flight, and reused."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.webhooks.receiver import Reply
from webhooks import ssrf, transport

pytestmark = pytest.mark.usefixtures("allow_private")


def _burst(target, address, size: int) -> list[int]:
    def post(_):
        return transport.post(
            target, address, body=b"{}", headers={}, timeout=5, excerpt_bytes=64
        ).status

    with ThreadPoolExecutor(size) as pool:
        return list(pool.map(post, range(size)))


def test_a_busy_endpoints_connections_are_kept_alive_and_reused(receiver, settings):
    settings.CONVEYOR_WEBHOOK_CONCURRENCY = 32
    settings.CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY = 8
    receiver.script("/hook", *[Reply(status=204, body=b"", delay=0.3)] * 16)
    target, address = ssrf.guard(receiver.url("/hook"))
    transport._pools.clear()
    assert _burst(target, address, 8) == [204] * 8  # eight at once: eight connections
    assert _burst(target, address, 8) == [204] * 8  # the same eight again
    pool = transport._pool(target, address, None)
    assert pool.num_connections == 8  # none opened for the second burst, none dropped
    assert len(receiver.received("/hook")) == 16


def test_a_pool_keeps_no_more_than_the_worker_has_threads(settings):
    settings.CONVEYOR_WEBHOOK_CONCURRENCY = 4
    settings.CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY = 16
    assert transport._connections_kept() == 4
