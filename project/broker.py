"""The embedded broker: kombu's filesystem transport, answering a worker's shutdown at once,
and never handing a consumer a message half written. (Redis: project/redis_broker.py.)

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
"""

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

# The header jobs.publish sets on a job's doorbell, for project/redis_broker.py. Kept here so
# that publishing does not import the Redis client where the broker is not Redis.
DOORBELL_HEADER = "conveyor_doorbell"


class FilesystemChannel(filesystem.Channel):
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
    Channel = FilesystemChannel

    def drain_events(self, connection, timeout=None):
        if timeout and self.polling_interval:
            timeout = min(timeout, self.polling_interval)
        return super().drain_events(connection, timeout=timeout)
