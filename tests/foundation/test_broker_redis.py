"""Conveyor's Redis transport: kombu's, with one client per channel for the commands it
sends outside its event loop (publishes, and the unacknowledged bookkeeping of every
message taken and acknowledged)."""

import os
import threading
import uuid

import redis
from django.conf import settings
from kombu import Connection, Exchange, Queue

from project.broker import RedisTransport
from project.celery import app

MESSAGES = 400


def test_a_redis_broker_url_gets_conveyors_transport():
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    with app.connection_for_write() as conn:
        assert conn.transport_cls == "project.broker:RedisTransport"
        assert isinstance(conn.transport, RedisTransport)


def test_a_channel_keeps_one_client_until_its_pool_is_replaced():
    with Connection(os.environ["TEST_REDIS_URL"], transport=RedisTransport) as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
        channel._pool = None  # as kombu does when it drops its connections
        with channel.conn_or_acquire() as third:
            assert third is not first
            assert third.connection_pool is channel.pool
            assert third.ping()


def test_messages_taken_and_acknowledged_from_many_threads_leave_nothing_unacked():
    """Publish, take and acknowledge through the shared client, acknowledgements coming from
    several threads at once as a threads-pool worker's do: every message arrives once and
    the transport's unacknowledged records of them are gone."""
    url = os.environ["TEST_REDIS_URL"]
    name = f"conveyor-test-{uuid.uuid4().hex}"
    queue = Queue(name, Exchange(name), routing_key=name)
    received: list[int] = []
    tags: list[str] = []
    lock = threading.Lock()
    with Connection(url, transport=RedisTransport) as conn:
        with conn.Producer() as producer:
            for n in range(MESSAGES):
                producer.publish(
                    {"n": n},
                    exchange=queue.exchange,
                    routing_key=name,
                    declare=[queue],
                    serializer="json",
                )
        pending: list = []

        def on_message(body, message) -> None:
            pending.append(message)
            with lock:
                received.append(body["n"])
                tags.append(message.delivery_tag)

        with conn.Consumer(queue, callbacks=[on_message], accept=["json"]):
            while len(received) < MESSAGES:
                conn.drain_events(timeout=10)
                if len(pending) >= 8:  # acknowledge a batch from threads at once (the pool
                    # keeps 10 connections)
                    batch, pending[:] = list(pending), []
                    threads = [threading.Thread(target=m.ack) for m in batch]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join(timeout=10)
            for message in pending:
                message.ack()
        unacked = conn.default_channel.unacked_key
    client = redis.Redis.from_url(url)
    try:
        assert sorted(received) == list(range(MESSAGES))
        assert client.llen(name) == 0
        assert client.hmget(unacked, tags) == [None] * MESSAGES  # each one acknowledged
    finally:
        client.delete(name)
