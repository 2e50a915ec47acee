"""Run one step under its supervisor and pump its output into the log until it is over.

The loop reads the log pipe (bounded reads), stores chunks on time or size, calls the
heartbeat at least every ``HEARTBEAT_SECONDS`` (lease + cancel flag) and watches the
deadline. To stop a step it signals the supervisor, which does the two-phase stop of the
whole process tree; should the supervisor itself hang, the runner SIGKILLs it and the group.
"""

import contextlib
import enum
import fcntl
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from deployments.runner.logwriter import LogWriter

SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
READ_BYTES = 1024 * 1024
PIPE_BYTES = 1024 * 1024
F_SETPIPE_SZ = 1031
# Once the supervisor has exited, how long to wait for the log pipe to close.
DRAIN_SECONDS = 5.0
# Beyond the grace, how long the supervisor may take before the runner kills it itself.
SUPERVISOR_SLACK_SECONDS = 10.0
STATUS_LIMIT = 64 * 1024


class Stop(enum.Enum):
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"  # the job's lease was taken away: another party owns the outcome now
    SHUTDOWN = "shutdown"  # the worker is shutting down past its grace (jobs.shutdown)


@dataclass(frozen=True)
class StepResult:
    exit_code: int | None
    stopped: Stop | None
    seconds: float
    error: str = ""


class Watch:
    """What may end a step early: the heartbeat's cancel flag, a lost lease, a deadline."""

    def __init__(self, beat, deadline: float | None) -> None:
        self.beat = beat
        self.deadline = deadline

    def check(self) -> Stop | None:
        """Return why the step must stop now, or None."""
        verdict = self.beat.tick()
        if verdict is not None:
            return verdict
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return Stop.TIMED_OUT
        return None


def run_step(
    *, command: str, env: dict, cwd: str, grace: float, watch: Watch, log: LogWriter
) -> StepResult:
    """Run ``command`` with ``/bin/sh -c`` under a supervisor; return how it ended."""
    began = time.monotonic()
    read_end, write_end = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(read_end, F_SETPIPE_SZ, PIPE_BYTES)
    try:
        supervisor = subprocess.Popen(
            [sys.executable, "-I", "-S", SUPERVISOR, str(grace), str(os.getpid()), "--"]
            + ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            close_fds=True,
            # Out of the worker's process group: a Ctrl-C meant for the worker's terminal
            # must not stop a step; the worker's death still does (parent-death signal).
            start_new_session=True,
        )
    except OSError as exc:
        os.close(read_end)
        return StepResult(None, None, time.monotonic() - began, error=f"cannot start: {exc}")
    finally:
        os.close(write_end)
    pump = _Pump(supervisor, read_end, log, grace)
    try:
        return pump.run(watch, began)
    finally:
        pump.close()


class _Pump:
    def __init__(self, supervisor: subprocess.Popen, read_end: int, log: LogWriter, grace: float):
        self.supervisor = supervisor
        self.read_end = read_end
        self.log = log
        self.grace = grace
        self.status = bytearray()
        self.selector = selectors.DefaultSelector()
        self.selector.register(read_end, selectors.EVENT_READ, "log")
        self.selector.register(supervisor.stderr, selectors.EVENT_READ, "status")
        self.open = {"log", "status"}
        self.stop: Stop | None = None
        self.stop_sent_at: float | None = None

    def run(self, watch: Watch, began: float) -> StepResult:
        """Pump output until the supervisor has exited and the pipes are closed."""
        exited_at = None
        while self.open:
            self._read(timeout=0.2)
            self.log.tick()
            if self.stop is None:
                self.stop = watch.check()
                if self.stop is not None:
                    self._ask_to_stop()
            elif self.stop is not Stop.LOST:
                watch.beat.tick()  # keep the lease alive while the step winds down
            self._kill_if_hung()
            if exited_at is None and self.supervisor.poll() is not None:
                exited_at = time.monotonic()
            if exited_at is not None and time.monotonic() - exited_at > DRAIN_SECONDS:
                break
        self.supervisor.wait()
        self.log.flush()
        exit_code = self._exit_code()
        error = ""
        if exit_code is None and self.stop is None:  # the supervisor failed: say why
            error = "supervisor: " + bytes(self.status).decode(errors="replace").strip()[-500:]
        return StepResult(exit_code, self.stop, time.monotonic() - began, error=error)

    def _read(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            if key.data == "log":
                data = os.read(self.read_end, READ_BYTES)
                if data:
                    self.log.write(data)
                    continue
            else:
                data = self.supervisor.stderr.read1(STATUS_LIMIT)
                if data:
                    if len(self.status) < STATUS_LIMIT:
                        self.status += data
                    continue
            self.selector.unregister(key.fileobj)
            self.open.discard(key.data)

    def _ask_to_stop(self) -> None:
        self.stop_sent_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            self.supervisor.send_signal(signal.SIGTERM)

    def _kill_if_hung(self) -> None:
        """SIGKILL the supervisor and the step group if the supervisor overran its grace."""
        if self.stop_sent_at is None or self.supervisor.poll() is not None:
            return
        if time.monotonic() - self.stop_sent_at < self.grace + SUPERVISOR_SLACK_SECONDS:
            return
        step_pid = self._messages().get("started")
        if step_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(step_pid), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.supervisor.kill()

    def _messages(self) -> dict:
        merged: dict = {}
        for line in bytes(self.status).splitlines():
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict):
                    merged.update(message)
        return merged

    def _exit_code(self) -> int | None:
        return self._messages().get("exit_code")

    def close(self) -> None:
        """Release the pipes; after an exception in the loop, stop the step first."""
        if self.supervisor.poll() is None:
            self._ask_to_stop()
            try:
                self.supervisor.wait(self.grace + SUPERVISOR_SLACK_SECONDS)
            except subprocess.TimeoutExpired:
                self.stop_sent_at = float("-inf")
                self._kill_if_hung()
                self.supervisor.wait()
        self.selector.close()
        with contextlib.suppress(OSError):
            os.close(self.read_end)
        if self.supervisor.stderr:
            self.supervisor.stderr.close()
