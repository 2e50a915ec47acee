"""Run one deployment step in its own process group; make sure none of it outlives the run.

Started by the runner as::

    python -I -S supervisor.py GRACE RUNNER_PID -- /bin/sh -c COMMAND

with the step's environment and working directory. Standard library only, and no Django:
it must start fast and stay small.

* The step gets a new session (so a new process group); its stdout and stderr both go to
  this process's fd 1, the runner's log pipe. This process then points its own fd 1 at
  /dev/null, so the pipe closes exactly when the step's processes are gone.
* ``PR_SET_PDEATHSIG``: when the runner dies (``kill -9`` of the worker's pool child, the OOM
  killer) the kernel sends this process SIGTERM, and it stops the step like a cancel.
* ``PR_SET_CHILD_SUBREAPER``: descendants orphaned by the step (daemonised, or in a session of
  their own) are re-parented here rather than to init, so they are found and stopped too.
* Stopping (SIGTERM, SIGINT or SIGHUP received): SIGTERM to the group and to every
  descendant, wait up to GRACE seconds, then SIGKILL. Processes left behind by a step that
  exited on its own are stopped the same way.
* fd 2 is the status channel: JSON lines ``{"started": PID}`` and, last,
  ``{"exit_code": N|null, "signal": N|null, "stopped": bool}``.
"""

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_SECONDS = 0.05
# After SIGKILL, how long to wait for the kernel to take the processes away.
KILL_WAIT_SECONDS = 10.0

_stop = {"requested": False}


def _on_stop_signal(signum, frame) -> None:
    _stop["requested"] = True


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _report(**fields) -> None:
    with contextlib.suppress(OSError):  # the runner is gone; nobody reads the status any more
        os.write(2, (json.dumps(fields) + "\n").encode())


def descendants(root: int) -> list[int]:
    """Return the living (non-zombie) descendants of ``root``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _anything_left(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return bool(descendants(os.getpid()))
    except PermissionError:
        return True


def _reap(step_pid: int, statuses: dict) -> None:
    """Collect every exited child; remember the step's own wait status."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == step_pid:
            statuses["step"] = status


def _stop_everything(pgid: int, grace: float, statuses: dict, started: float | None) -> None:
    """SIGTERM the step's processes, SIGKILL what is left after ``grace``; reap them all."""
    began = started if started is not None else time.monotonic()
    _signal_all(pgid, signal.SIGTERM)
    while time.monotonic() - began < grace:
        _reap(pgid, statuses)
        if not _anything_left(pgid):
            return
        time.sleep(POLL_SECONDS)
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while time.monotonic() < deadline:
        _signal_all(pgid, signal.SIGKILL)
        _reap(pgid, statuses)
        if not _anything_left(pgid):
            return
        time.sleep(POLL_SECONDS)


class _Wake:
    """Sleep until the step exits or a signal arrives (pidfd + wakeup fd), or a timeout."""

    def __init__(self, pid: int) -> None:
        self.read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfd (old kernel): poll instead
            self.pidfd = None

    def wait(self, timeout: float) -> None:
        """Return when the step exits, a signal arrives or ``timeout`` passes."""
        if self.pidfd is None:
            timeout = min(timeout, POLL_SECONDS)
        fds = [self.read] if self.pidfd is None else [self.read, self.pidfd]
        ready, _, _ = select.select(fds, [], [], timeout)
        if self.read in ready:
            os.read(self.read, 512)


def main(argv: list[str]) -> int:
    """Run the step, stop it when told (or orphaned), report how it ended."""
    grace, runner_pid, command = float(argv[1]), int(argv[2]), argv[4:]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_stop_signal)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != runner_pid:  # the runner died before the death signal was armed
        _report(exit_code=None, signal=None, stopped=True)
        return 0
    step = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=1,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
    )
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    _report(started=step.pid)
    statuses: dict = {}
    stopping_since = None
    wake = _Wake(step.pid)
    while True:
        _reap(step.pid, statuses)
        if "step" in statuses:
            break
        if _stop["requested"] and stopping_since is None:
            stopping_since = time.monotonic()
            _signal_all(step.pid, signal.SIGTERM)
        if stopping_since is not None and time.monotonic() - stopping_since >= grace:
            break
        wake.wait(POLL_SECONDS if stopping_since is not None else 1.0)
    if _anything_left(step.pid):
        _stop_everything(step.pid, grace, statuses, stopping_since)
    _reap(step.pid, statuses)
    step.returncode = 0  # waited for above; keep Popen from waiting again
    status = statuses.get("step")
    _report(
        exit_code=os.waitstatus_to_exitcode(status) if status is not None else None,
        signal=os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None,
        stopped=_stop["requested"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
