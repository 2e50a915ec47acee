"""The embedded broker: kombu's filesystem transport, answering a worker's shutdown at once.

A worker on a transport without an event loop (the filesystem one) consumes in Celery's
``synloop``, which blocks in ``drain_events(timeout=2.0)`` and looks at the shutdown flag
only between two calls, once more in a ``finally``: an idle worker took 4-6 s to stop,
past the moment a process manager sends SIGKILL. Capping each wait at the polling interval
lets the loop see SIGTERM within a fraction of a second; messages arrive just as fast.
"""

from kombu.transport import filesystem


class FilesystemTransport(filesystem.Transport):
    def drain_events(self, connection, timeout=None):
        if timeout and self.polling_interval:
            timeout = min(timeout, self.polling_interval)
        return super().drain_events(connection, timeout=timeout)
