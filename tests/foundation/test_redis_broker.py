"""Conveyor's Redis transport (project/redis_broker.py): one client per channel, and a job's
doorbell kept out of Redis's unacknowledged records yet put back when its worker lets it go."""

import json
import os
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime

import pytest
import redis
from django.conf import settings
from kombu import Connection, Exchange, Queue
from kombu.transport import redis as kombu_redis

from jobs.models import Job
from jobs.publish import publish
from project.broker import DOORBELL_HEADER
from project.celery import app
from project.redis_broker import RedisTransport
from tests.processes import ROOT

MESSAGES = 400


@pytest.fixture
def queue():
    name = f"conveyor-test-{uuid.uuid4().hex}"
    yield Queue(name, Exchange(name), routing_key=name)
    client = redis.Redis.from_url(os.environ["TEST_REDIS_URL"])
    client.delete(name, *client.scan_iter(match=f"*{name}*"))  # its bindings too


@pytest.fixture
def client():
    return redis.Redis.from_url(os.environ["TEST_REDIS_URL"])


def _connection() -> Connection:
    return Connection(os.environ["TEST_REDIS_URL"], transport=RedisTransport)


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


def test_a_redis_broker_url_gets_conveyors_transport():
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    with app.connection_for_write() as conn:
        assert conn.transport_cls == "project.redis_broker:RedisTransport"
        assert isinstance(conn.transport, RedisTransport)


_PUBLISH_AND_LIST_REDIS_MODULES = """
import sys
import django
django.setup()
from django.utils import timezone
from jobs.models import Job
from jobs.publish import publish
job = Job(pk=1, task="jobs.noop", queue=sys.argv[1], run_after=timezone.now())
assert publish([job]) == 1
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] == "redis")) or "-")
"""


@pytest.mark.parametrize("redis_broker", [False, True])
def test_only_a_redis_broker_brings_in_the_redis_client(tmp_path, queue, client, redis_broker):
    env = {**os.environ, "CONVEYOR_VAR_DIR": str(tmp_path)}
    env.pop("CELERY_BROKER_URL", None)  # the embedded broker
    if redis_broker:
        env["CELERY_BROKER_URL"] = os.environ["TEST_REDIS_URL"]
    ran = subprocess.run(
        [sys.executable, "-c", _PUBLISH_AND_LIST_REDIS_MODULES, queue.name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    imported = ran.stdout.split()
    assert ("redis" in imported) is redis_broker, imported  # 100 ms of start-up when it is
    assert client.llen(queue.name) == (1 if redis_broker else 0)  # it did publish, there


def test_every_doorbell_published_carries_the_header(queue, client):
    job = Job(pk=987654, task="jobs.noop", queue=queue.name, run_after=datetime.now(UTC))
    assert publish([job]) == 1
    (raw,) = client.lrange(queue.name, 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == "jobs.noop"
    assert message["headers"][DOORBELL_HEADER] is True


def test_a_channel_keeps_one_client_until_its_pool_is_replaced():
    with _connection() as conn:
        channel = conn.default_channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
        channel._pool = None  # as kombu does when it drops its connections
        with channel.conn_or_acquire() as third:
            assert third is not first
            assert third.connection_pool is channel.pool
            assert third.ping()


def test_a_doorbell_costs_redis_no_unacked_record_and_other_messages_keep_theirs(
    queue, client, monkeypatch
):
    """kombu's own recording (``QoS.append``) and removal (``_remove_from_indices``) run for
    the plain message only; the doorbell is held in memory (the prefetch count) alone."""
    recorded, removed = [], []
    append, remove = kombu_redis.QoS.append, kombu_redis.QoS._remove_from_indices

    def spy_append(qos, message, delivery_tag):
        recorded.append(delivery_tag)
        return append(qos, message, delivery_tag)

    def spy_remove(qos, delivery_tag, pipe=None):
        removed.append(delivery_tag)
        return remove(qos, delivery_tag, pipe)

    monkeypatch.setattr(kombu_redis.QoS, "append", spy_append)
    monkeypatch.setattr(kombu_redis.QoS, "_remove_from_indices", spy_remove)
    with _connection() as conn:
        _publish(conn, queue, {"job": 1}, doorbell=True)
        _publish(conn, queue, {"task": 2}, doorbell=False)
        doorbell, other = _take(conn, queue), _take(conn, queue)
        unacked = conn.default_channel.unacked_key
        assert (doorbell.payload, other.payload) == ({"job": 1}, {"task": 2})
        assert not client.hexists(unacked, doorbell.delivery_tag)
        assert client.hexists(unacked, other.delivery_tag)
        qos = conn.default_channel.qos
        assert doorbell.delivery_tag in qos._delivered  # counted against the prefetch limit
        doorbell.ack()
        other.ack()
        assert not client.hexists(unacked, other.delivery_tag)
        assert qos._doorbell_tags == set()
    assert recorded == [other.delivery_tag]
    assert removed == [other.delivery_tag]
    assert client.llen(queue.name) == 0


def test_a_doorbell_taken_is_put_back_when_its_channel_closes_or_it_is_requeued(queue, client):
    with _connection() as conn:
        _publish(conn, queue, {"job": 1}, doorbell=True)
        _take(conn, queue)  # taken, never acknowledged: the worker stops
    assert client.llen(queue.name) == 1  # put back by the channel's close
    with _connection() as conn:
        _publish(conn, queue, {"job": 2}, doorbell=True)
        first = _take(conn, queue)
        assert first.payload == {"job": 1}
        first.requeue()  # at the back of the queue, as kombu requeues any message
        assert client.llen(queue.name) == 2
        second = _take(conn, queue)
        assert second.payload == {"job": 2}
        second.ack()
        again = _take(conn, queue)
        assert again.payload == {"job": 1}
        again.ack()
    assert client.llen(queue.name) == 0  # acknowledged: nothing put back at close


@pytest.mark.parametrize("doorbell", [True, False])
def test_a_channel_closed_after_its_transport_was_detached_fails_as_a_lost_connection(
    queue, doorbell
):
    """kombu may close a channel once its connection's transport was detached (a broker
    connection lost, then closed; a chaos run's worker hit it). The messages it holds cannot
    be put back: that must be a connection error, which kombu's close ignores and a worker
    reconnects from, not an AttributeError, which stopped the worker as unrecoverable."""
    conn = _connection()
    _publish(conn, queue, {"job": 1}, doorbell=doorbell)
    _take(conn, queue)  # held, not acknowledged
    channel = conn.default_channel
    transport = conn.transport
    transport.client = None  # as kombu's Connection._do_close_transport leaves it
    with pytest.raises(redis.ConnectionError):
        channel.close()
    conn.maybe_close_channel(channel)  # kombu's own close path: nothing escapes it


_DIES_HOLDING = """
import os, sys
from kombu import Connection, Exchange, Queue
from project.redis_broker import RedisTransport
name = sys.argv[1]
queue = Queue(name, Exchange(name), routing_key=name)
with Connection(os.environ["TEST_REDIS_URL"], transport=RedisTransport) as conn:
    taken = []
    with conn.Consumer(queue, callbacks=[lambda body, message: taken.append(message)]):
        while len(taken) < 2:
            conn.drain_events(timeout=10)
    print(" ".join(m.delivery_tag for m in taken), flush=True)
    os._exit(0)  # dies holding both, as a worker killed with -9 would
"""


def test_a_doorbell_held_by_a_worker_that_dies_is_gone_and_other_messages_wait_unacked(
    queue, client
):
    """The trade-off, as documented: the doorbell is in neither the queue nor Redis's
    unacknowledged records (the sweeper re-sends its job); a plain message is, for kombu to
    redeliver after the visibility timeout."""
    with _connection() as conn:
        _publish(conn, queue, {"job": 1}, doorbell=True)
        _publish(conn, queue, {"task": 2}, doorbell=False)
        unacked = conn.default_channel.unacked_key
    died = subprocess.run(
        [sys.executable, "-c", _DIES_HOLDING, queue.name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == 0, died.stderr[-2000:]
    doorbell_tag, other_tag = died.stdout.split()
    try:
        assert client.llen(queue.name) == 0
        assert not client.hexists(unacked, doorbell_tag)
        assert json.loads(client.hget(unacked, other_tag))[0]["body"]
    finally:
        client.hdel(unacked, other_tag)
        client.zrem(f"{unacked}_index", other_tag)


@pytest.mark.parametrize("doorbell", [True, False])
def test_messages_acknowledged_from_many_threads_share_one_client(
    queue, client, monkeypatch, doorbell
):
    """Acknowledgements come from several threads at once, as a threads-pool worker's do:
    every message arrives once, each is acknowledged, and the channel made one client."""
    made = []
    create = kombu_redis.Channel._create_client  # what builds a client

    def counting(channel, asynchronous=False):
        made.append(asynchronous)
        return create(channel, asynchronous)

    monkeypatch.setattr(kombu_redis.Channel, "_create_client", counting)
    received: list[int] = []
    tags: list[str] = []
    with _connection() as conn:
        for n in range(MESSAGES):
            _publish(conn, queue, {"n": n}, doorbell=doorbell)
        pending: list = []

        def on_message(body, message) -> None:
            pending.append(message)
            received.append(body["n"])
            tags.append(message.delivery_tag)

        with conn.Consumer(queue, callbacks=[on_message], accept=["json"]):
            while len(received) < MESSAGES:
                conn.drain_events(timeout=10)
                if len(pending) >= 8:  # at once, from threads (the pool keeps 10 connections)
                    batch, pending[:] = list(pending), []
                    threads = [threading.Thread(target=m.ack) for m in batch]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join(timeout=10)
                        assert not thread.is_alive()
            for message in pending:
                message.ack()
        channel = conn.default_channel
        unacked = channel.unacked_key
        assert channel.qos._doorbell_tags == set()
    assert sorted(received) == list(range(MESSAGES))
    assert client.llen(queue.name) == 0
    assert client.hmget(unacked, tags) == [None] * MESSAGES  # each one acknowledged
    assert made.count(False) == 1  # one client for the commands outside the event loop
