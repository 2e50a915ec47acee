"""Stream a deployment's output into append-only LogChunk rows with bounded memory.

Bytes are masked, buffered, and written as chunks of at most ``LOG_CHUNK_BYTES`` as soon as a
full chunk is there, and at least every ``LOG_FLUSH_SECONDS`` otherwise. The writer never
holds more than one chunk plus one read, whatever the output size.

Step output is one masked stream across the deployment's steps: a possible start of a secret
held at the end of one step stays held (``begin_step`` and ``flush`` keep it) until the next
step's output shows whether it is one, so it then appears after the runner's lines between
the steps. The runner's own lines (``line``) are masked whole, outside that stream.
"""

import time

from deployments.conf import LOG_CHUNK_BYTES, LOG_FLUSH_SECONDS
from deployments.models import LogChunk
from deployments.runner.masking import SecretMasker


class LogWriter:
    """Append masked output to one deployment's log; ``offset`` counts bytes written."""

    def __init__(self, deployment_id: int, masker: SecretMasker) -> None:
        self.deployment_id = deployment_id
        self.masker = masker
        self.step_run_id: int | None = None
        self.sequence = 0
        self.offset = 0  # bytes stored in LogChunk rows
        self._pending = bytearray()
        self._last_flush = time.monotonic()
        self._ends_with_newline = True

    @property
    def end(self) -> int:
        """Return the offset the next stored byte will have (stored + buffered)."""
        return self.offset + len(self._pending)

    def begin_step(self, step_run_id: int | None) -> None:
        """Attribute what follows to ``step_run_id`` (flushing what came before)."""
        self.flush()
        self.step_run_id = step_run_id

    def write(self, data: bytes) -> None:
        """Take output bytes; store every complete chunk at once."""
        if not data:
            return
        self._ends_with_newline = data.endswith(b"\n")
        released = self.masker.feed(data)
        if released:
            self._pending += released
        if len(self._pending) >= LOG_CHUNK_BYTES:
            self._store(whole_chunks_only=True)

    def line(self, text: str) -> None:
        """Write one line of the runner's own (starting a new line if output did not end one)."""
        prefix = "" if self._ends_with_newline else "\n"
        self._ends_with_newline = True
        self._pending += self.masker.mask(f"{prefix}{text}\n".encode())

    def tick(self) -> None:
        """Store buffered output if it has waited ``LOG_FLUSH_SECONDS``."""
        if self._pending and time.monotonic() - self._last_flush >= LOG_FLUSH_SECONDS:
            self._store(whole_chunks_only=False)

    def flush(self, *, final: bool = False) -> None:
        """Store everything buffered; ``final`` (the output has ended) also releases the tail."""
        if final:
            self._pending += self.masker.flush()
        if self._pending:
            self._store(whole_chunks_only=False)

    def _store(self, *, whole_chunks_only: bool) -> None:
        rows = []
        view = memoryview(self._pending)
        taken = 0
        while len(view) - taken >= LOG_CHUNK_BYTES or (not whole_chunks_only and taken < len(view)):
            piece = bytes(view[taken : taken + LOG_CHUNK_BYTES])
            rows.append(
                LogChunk(
                    deployment_id=self.deployment_id,
                    step_run_id=self.step_run_id,
                    sequence=self.sequence,
                    offset=self.offset,
                    size=len(piece),
                    data=piece,
                )
            )
            self.sequence += 1
            self.offset += len(piece)
            taken += len(piece)
        view.release()
        if rows:
            LogChunk.objects.bulk_create(rows)
            del self._pending[:taken]
        self._last_flush = time.monotonic()
