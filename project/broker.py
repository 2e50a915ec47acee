"""Conveyor's kombu transports: the embedded broker, and Redis with one client reused.

The embedded broker: kombu's filesystem transport, answering a worker's shutdown at once,
and never handing a consumer a message half written.

kombu creates a message's file and then writes it, and a consumer takes any ``.msg`` file it
sees without the writer's lock: a consumer polling at that moment reads an empty file, which
its worker treats as unrecoverable (``JSONDecodeError``) and exits. Here a message is written
under a name no consumer takes (``….msg.part``) and renamed into place once complete
(``os.replace`` is atomic within one directory).

A worker on a transport without an event loop (the filesystem one) consumes in Celery's
``synloop``, which blocks in ``drain_events(timeout=2.0)`` and looks at the shutdown flag
only between two calls, once more in a ``finally``: an idle worker took 4-6 s to stop,
past the moment a process manager sends SIGKILL. Capping each wait at the polling interval
lets the loop see SIGTERM within a fraction of a second; messages arrive just as fast.

Redis: kombu's transport builds a new ``redis.Redis`` client for every command it sends
outside its event loop: for each message a worker takes (recording it unacknowledged)
and again for its acknowledgement, and for every publish. Building one costs about 60 µs
of the GIL, and with them the garbage they leave, in a worker whose threads are busy
posting webhooks; here each channel keeps one (a ``redis.Redis`` client is safe to share
between threads: it takes a connection from its pool per command).

And a job's doorbell (a message jobs.publish marks with ``DOORBELL_HEADER``) is not
recorded as unacknowledged in Redis, which costs a round trip when it is taken and another
when it is acknowledged: the job's row is the record. A doorbell taken and not yet
acknowledged is still counted against the prefetch limit and still put back in its queue
when its worker stops (warm shutdown, a closed channel, a requeue), from the copy the
worker holds. One lost with its worker (``kill -9``) is not redelivered after the
visibility timeout; the sweeper re-sends the jobs it rang for (their runs, once claimed,
are the reaper's). Every other message keeps kombu's bookkeeping.
"""

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem, redis, virtual
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put ``payload`` onto ``queue``: written whole under a temporary name, then renamed."""
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.part"
        try:
            with open(partial, "wb") as out:
                out.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class FilesystemTransport(filesystem.Transport):
    Channel = Channel

    def drain_events(self, connection, timeout=None):
        if timeout and self.polling_interval:
            timeout = min(timeout, self.polling_interval)
        return super().drain_events(connection, timeout=timeout)


# Set on a job's doorbell by jobs.publish.
DOORBELL_HEADER = "conveyor_doorbell"


class RedisQoS(redis.QoS):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._doorbells: set = set()  # the delivery tags of doorbells taken, not acknowledged

    def append(self, message, delivery_tag):
        if not message.headers.get(DOORBELL_HEADER):
            return super().append(message, delivery_tag)
        self._doorbells.add(delivery_tag)
        return virtual.QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag):
        if delivery_tag not in self._doorbells:
            return super().ack(delivery_tag)
        self._doorbells.discard(delivery_tag)
        return virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        if delivery_tag not in self._doorbells:
            return super().reject(delivery_tag, requeue)
        if requeue:
            self._put_back(delivery_tag, leftmost=True)
        self._doorbells.discard(delivery_tag)
        return virtual.QoS.ack(self, delivery_tag)

    def restore_by_tag(self, tag, client=None, leftmost=False):
        if tag not in self._doorbells:
            return super().restore_by_tag(tag, client, leftmost)
        self._put_back(tag, client, leftmost)
        self._doorbells.discard(tag)
        return None

    def _put_back(self, tag, client=None, leftmost=False):
        """Put a doorbell taken by this worker back in its queue, from the copy it holds."""
        message = self._delivered[tag]
        delivery = message.delivery_info
        with self.channel.conn_or_acquire(client) as client:
            pipe = client.pipeline()
            self.channel._do_restore_message(
                message._raw, delivery["exchange"], delivery["routing_key"], pipe, leftmost
            )
            pipe.execute()


class RedisChannel(redis.Channel):
    QoS = RedisQoS
    _kept: tuple | None = None  # (the pool, the client made for it)

    def _create_client(self, asynchronous=False):
        if asynchronous:  # the event loop's own client, made once per channel by kombu
            return super()._create_client(asynchronous=True)
        pool, kept = self.pool, self._kept
        if kept is None or kept[0] is not pool:  # a new pool after a reconnect: a new client
            kept = self._kept = (pool, super()._create_client())
        return kept[1]


class RedisTransport(redis.Transport):
    Channel = RedisChannel
