"""Conveyor's Redis transport: kombu's, with one client per channel for the commands it
sends outside its event loop, and no unacknowledged record in Redis of a job's doorbell
(the job's row is its record), which is still put back when its worker lets it go."""

import os
import threading
import uuid

import redis
from django.conf import settings
from kombu import Connection, Exchange, Queue

from project.broker import DOORBELL_HEADER, RedisTransport
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


def _queue() -> Queue:
    name = f"conveyor-test-{uuid.uuid4().hex}"
    return Queue(name, Exchange(name), routing_key=name)


def _publish(conn, queue: Queue, body: dict, *, doorbell: bool) -> None:
    with conn.Producer() as producer:
        producer.publish(
            body,
            exchange=queue.exchange,
            routing_key=queue.routing_key,
            declare=[queue],
            serializer="json",
            headers={DOORBELL_HEADER: True} if doorbell else {},
        )


def _take(conn, queue: Queue):
    """Take one message from ``queue`` (not acknowledged)."""
    taken: list = []
    with conn.Consumer(queue, callbacks=[lambda body, message: taken.append(message)]):
        conn.drain_events(timeout=10)
    return taken[0]


def test_a_doorbell_is_not_recorded_unacked_in_redis_and_other_messages_are():
    url = os.environ["TEST_REDIS_URL"]
    queue = _queue()
    client = redis.Redis.from_url(url)
    with Connection(url, transport=RedisTransport) as conn:
        _publish(conn, queue, {"job": 1}, doorbell=True)
        _publish(conn, queue, {"task": 2}, doorbell=False)
        doorbell, other = _take(conn, queue), _take(conn, queue)
        unacked = conn.default_channel.unacked_key
        assert (doorbell.payload, other.payload) == ({"job": 1}, {"task": 2})
        assert not client.hexists(unacked, doorbell.delivery_tag)
        assert client.hexists(unacked, other.delivery_tag)  # kombu's own bookkeeping
        qos = conn.default_channel.qos
        assert doorbell.delivery_tag in qos._delivered  # counted against the prefetch limit
        doorbell.ack()
        other.ack()
        assert not client.hexists(unacked, other.delivery_tag)
        assert doorbell.delivery_tag not in qos._doorbells
    assert client.llen(queue.name) == 0
    client.delete(queue.name)


def test_a_doorbell_taken_is_put_back_when_its_channel_closes_or_it_is_requeued():
    url = os.environ["TEST_REDIS_URL"]
    queue = _queue()
    client = redis.Redis.from_url(url)
    try:
        with Connection(url, transport=RedisTransport) as conn:
            _publish(conn, queue, {"job": 1}, doorbell=True)
            _take(conn, queue)  # taken, never acknowledged: the worker stops
        assert client.llen(queue.name) == 1  # put back by the channel's close
        with Connection(url, transport=RedisTransport) as conn:
            again = _take(conn, queue)
            assert again.payload == {"job": 1}
            assert client.llen(queue.name) == 0
            again.requeue()
            assert client.llen(queue.name) == 1
            last = _take(conn, queue)
            assert last.payload == {"job": 1}
            last.ack()
        assert client.llen(queue.name) == 0  # acknowledged: nothing put back at close
    finally:
        client.delete(queue.name)
