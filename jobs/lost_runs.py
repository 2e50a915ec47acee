"""Runs lost with their worker process: Celery's ``task_failure`` signal, for JobTask tasks.

A job body's own exceptions never reach Celery (JobTask hands them to jobs.outcome). What does
is a pool child that died under a message (``kill -9``, the OOM killer) or went past its hard
time limit: Celery reports ``WorkerLostError`` / ``TimeLimitExceeded`` from the worker's parent
process, and has already acknowledged the message, so the broker will never deliver it again.
Here every job of that message is recovered at once (past a time limit, once the pool has
killed the child): the run the dead child held (found by
its holder, ``<node>/<pid>`` of a process that is gone) is decided by jobs.outcome and written
by jobs.completer (retrying, or dead once its attempts are spent; the attempt was counted at
claim), and the doorbells of a batch it had not reached yet are rung again for the queue.
The same happens for an error raised outside a body in the process itself (a claim or a
completion whose statement failed): the run it held ends with that error.
"""

import logging
import threading
import time
from pathlib import Path

from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery import signals
from django.db import close_old_connections, connections
from django.db.models import Q

from jobs import completer, outcome, queues
from jobs.models import Job, JobStatus
from jobs.task import JobTask, worker_id

logger = logging.getLogger("jobs")
_node = {"name": ""}


@signals.celeryd_init.connect
def _remember_node_name(sender=None, **kwargs) -> None:
    """Keep this worker's node name: it prefixes ``locked_by`` for every run it claims."""
    _node["name"] = str(sender or "")


@signals.task_failure.connect
def on_task_failure(sender=None, task_id=None, exception=None, args=None, **kwargs) -> None:
    """Recover the jobs of a message that failed outside its bodies (see the module doc)."""
    if not isinstance(sender, JobTask) or not args:
        return
    close_old_connections()
    ids = _ids(args[0])
    if isinstance(exception, WorkerLostError):  # in the worker's parent: the child is gone
        event = outcome.Event.lost(outcome.Happened.WORKER_LOST, _describe(exception), exception)
        recover_message(sender, ids, event, _node_runs(_node_name(sender)))
        return
    if isinstance(exception, TimeLimitExceeded):
        # Celery reports a hard time limit before the pool kills the child, so the run is
        # recovered off this thread, once the child is gone.
        event = outcome.Event.lost(outcome.Happened.TIME_LIMIT, _describe(exception), exception)
        runs = _node_runs(_node_name(sender))
        threading.Thread(
            target=_recover_after_kill, args=(sender, ids, event, runs), daemon=True
        ).start()
        return
    # Raised in this process outside a body (a claim or a completion that failed): end the
    # run this process held with that error, and send the rest of the message again.
    logger.warning("job.task_error", extra={"task": sender.name, "error": repr(exception)[:300]})
    held = Q(locked_by=worker_id(sender), pk__in=ids)
    recover_message(sender, ids, outcome.Event.raised(exception), held)


def _describe(exception: BaseException) -> str:
    return f"{type(exception).__name__}: {exception}"


def _node_name(task: JobTask) -> str:
    return _node["name"] or getattr(task.request, "hostname", "") or ""


class _NodeRuns(Q):
    """The runs of every pool child of ``node``: only those whose process is gone are lost."""


def _node_runs(node: str) -> Q:
    return _NodeRuns(locked_by__startswith=f"{node}/")


def _ids(value) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**63]


def recover_message(task: JobTask, job_ids: list[int], event, held_here: Q) -> None:
    """End the runs this worker lost (see the module doc); ring again for the message's queue.

    A message's claims take the best runnable jobs of its queue, not necessarily the ones it
    names, so the lost run is found by who held it, and the doorbells the message still
    carried are rung again for the queue's best due jobs (as many as it named).
    """
    for job in Job.objects.filter(held_here, status=JobStatus.RUNNING):
        if not isinstance(held_here, _NodeRuns) or _process_gone(job.locked_by):
            completer.finish(outcome.decide(event, job, task), job)
    _ring_again(job_ids)


def _ring_again(job_ids: list[int]) -> None:
    """Ring for the queue of the message that named ``job_ids``, once per id it named."""
    queue = Job.objects.filter(pk__in=job_ids[:1]).values_list("queue", flat=True).first()
    if queue is not None:
        queues.ring(queue, limit=len(job_ids))


SETTLE_SECONDS = 10.0  # how long a child past its hard time limit may take to be killed
POLL_SECONDS = 0.1


def _recover_after_kill(task: JobTask, job_ids: list[int], event, runs: Q) -> None:
    """Wait for the pool to kill the child past its time limit, then end the run it held.

    The run is one of this node's runs of ``task`` whose process is gone; every such run
    found is ended (two children past their limits at once are both ended by whichever
    thread looks first; the other finds their runs already ended, which the fenced end
    refuses). Left running past ``SETTLE_SECONDS``, a run is the reaper's once its lease
    runs out.
    """
    deadline = time.monotonic() + SETTLE_SECONDS
    try:
        while time.monotonic() < deadline:
            held = Job.objects.filter(runs, task=task.name, status=JobStatus.RUNNING)
            lost = [job for job in held if _process_gone(job.locked_by)]
            for job in lost:
                completer.finish(outcome.decide(event, job, task), job)
            if lost:
                break
            time.sleep(POLL_SECONDS)
        _ring_again(job_ids)
    except Exception:  # a thread's error would be lost: log it; the reaper is the backstop
        logger.exception("job.time_limit_recovery_failed", extra={"task": task.name})
    finally:
        connections.close_all()


def _process_gone(locked_by: str) -> bool:
    """Whether the process of run holder ``<node>/<pid>`` (on this host) has ended."""
    pid = locked_by.rsplit("/", 1)[-1]
    if not pid.isdigit():
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")
