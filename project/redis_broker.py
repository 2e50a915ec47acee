"""kombu's Redis transport, with less bookkeeping per message; used for a ``redis://`` broker
URL (``rediss://``, ``sentinel://`` and a failover list keep kombu's own).

One client per channel. kombu's transport builds a new ``redis.Redis`` client for every
command it sends outside its event loop: for each message a worker takes (recording it
unacknowledged), again for its acknowledgement, and for every publish. Building one costs
about 60 µs of the GIL, and the garbage it leaves, in a worker whose threads are busy
posting webhooks. Here each channel keeps one for its connection pool (a ``redis.Redis``
client is safe to share between threads: it takes a connection from the pool per command).

A job's doorbell is not recorded in Redis. For every message a worker takes, kombu writes
a copy to Redis's ``unacked`` hash and index (a ``MULTI`` … ``EXEC`` round trip) and deletes
it on acknowledgement (another), so that a message held by a worker that dies comes back
after ``visibility_timeout``. A job's doorbell — a message jobs.publish marks with
``DOORBELL_HEADER`` — needs no such copy: the job's row is the record, and the sweeper
re-sends a job that stays due and unclaimed. So a doorbell is only counted in the worker's
own memory (kombu's ``virtual.QoS``: it still counts against the prefetch limit), and put
back in its queue from that copy when the worker lets it go: a requeue, a closed channel
(a warm shutdown closes it once the running jobs have ended). What that gives up: a
doorbell held by a worker that dies (``kill -9``, a lost host, a kill during the shutdown
grace) or that cannot reach Redis when it lets go is never redelivered, and Redis's
``unacked`` hash no longer shows doorbells in flight. Its job is re-sent by the sweeper
(docs/operations.md, "Redis or RabbitMQ"): before this, the 4 h visibility timeout never
came first either. Every other message keeps kombu's bookkeeping.

Written against kombu 5.7: it relies on ``QoS._delivered``, ``Message._raw``,
``Channel._do_restore_message`` and ``Channel._create_client``.
"""

import redis as redis_py
from kombu.transport import redis, virtual

from project.broker import DOORBELL_HEADER


class RedisQoS(redis.QoS):
    """kombu's Redis QoS, keeping doorbells out of Redis's ``unacked`` hash and index."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._doorbell_tags: set[str] = set()  # taken and not yet acknowledged

    def append(self, message, delivery_tag):
        if not message.headers.get(DOORBELL_HEADER):
            return super().append(message, delivery_tag)
        self._doorbell_tags.add(delivery_tag)
        # The in-memory record only (the prefetch count, the copy to put back), not Redis's.
        return virtual.QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag):
        if delivery_tag not in self._doorbell_tags:
            return super().ack(delivery_tag)
        self._doorbell_tags.discard(delivery_tag)
        return virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        if delivery_tag not in self._doorbell_tags:
            return super().reject(delivery_tag, requeue)
        # Forgotten before it is put back: a consumer may take it again (the same tag) at once.
        message = self._delivered[delivery_tag]
        self._doorbell_tags.discard(delivery_tag)
        virtual.QoS.ack(self, delivery_tag)
        if requeue:
            self._put_back(message, leftmost=True)
        return None

    def restore_by_tag(self, tag, client=None, leftmost=False):
        """Called for each message still held when the channel closes (kombu's
        ``restore_unacked``). A doorbell acknowledged by a pool thread at that very moment
        may be put back all the same: its claim finds the job done and drops it."""
        if tag not in self._doorbell_tags:
            return super().restore_by_tag(tag, client, leftmost)
        self._doorbell_tags.discard(tag)
        self._put_back(self._delivered[tag], client, leftmost)
        return None

    def _put_back(self, message, client=None, leftmost=False) -> None:
        """Put a doorbell this worker holds back in its queue, from its copy."""
        delivery = message.delivery_info
        with self.channel.conn_or_acquire(client) as client:
            pipe = client.pipeline()
            self.channel._do_restore_message(
                message._raw, delivery["exchange"], delivery["routing_key"], pipe, leftmost
            )
            pipe.execute()


class RedisChannel(redis.Channel):
    """kombu's Redis channel, with RedisQoS and one client for its connection pool."""

    QoS = RedisQoS
    _kept: tuple[redis_py.ConnectionPool, redis_py.Redis] | None = None

    def _create_client(self, asynchronous=False):
        if self.connection.client is None:
            # kombu can close a channel after its transport was detached from the connection
            # (a broker connection lost, then closed): the pool cannot be rebuilt, and the
            # messages the channel holds cannot be put back (doorbells are re-sent by the
            # sweeper, others wait in Redis's unacked records). Say so as the connection
            # error it is, which kombu's close ignores and the worker reconnects from; an
            # AttributeError from kombu here stopped the worker as "unrecoverable".
            raise redis_py.ConnectionError("the broker connection is closed")
        if asynchronous:  # the event loop's own client, made once per channel by kombu
            return super()._create_client(asynchronous=True)
        pool, kept = self.pool, self._kept
        if kept is None or kept[0] is not pool:  # a new pool after a reconnect: a new client
            kept = self._kept = (pool, super()._create_client())
        return kept[1]


class RedisTransport(redis.Transport):
    Channel = RedisChannel
