"""A batch message's run: its jobs claimed a chunk at a time, their successes written together.

A batch message (jobs.publish) rings n doorbells of one task and queue. Its runner claims the
best runnable jobs of that queue a chunk at a time, in one statement, and runs their bodies
one after another; the successes of a chunk are written in one statement together with the
claim of the next chunk (jobs.completer.succeed_many_and_claim; the last chunk's on their
own). So n quick jobs cost a few statements and commits, not one each. A failure, a retry or
a cancel is written the moment its body ends (jobs.completer.finish), as on the single path.

A chunk is as many jobs as this process expects to run in ``CHUNK_BUDGET``, from the recent
run times of the task's bodies here (``chunk_size``): one at first and for slow work, the
whole message for no-ops. That bounds what a chunk costs: a success waits for the rest of
its chunk before it is written (about the budget, unless a body runs far longer than its
task's recent ones did), and a claimed job waits in this process, its lease kept by the
lease keeper, while the ones before it run.

A job claimed but not started when its worker is killed is recovered as any run lost with
its worker is (its attempt counted, as River and Oban count a fetched job's); on a warm
shutdown the jobs not started are handed back at once (``worker_shutdown``: due now, no
attempt spent) and the message's unused doorbells are rung again for its queue.

Under a limit that counts only slots (a queue's, a task's ``concurrency``) a chunk is
claimed under one lock; a rate, a key rule or fairness claims one job at a time
(jobs.limiter).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from jobs import completer, limiter, outcome, shutdown, statements
from jobs.lease import keeper
from jobs.models import Job

# How long, by its bodies' recent run times, a chunk is expected to run.
CHUNK_BUDGET = 0.05
# The weight of the newest body in a task's recent run time (an exponential average).
SMOOTHING = 0.3
_recent_seconds: dict[str, float] = {}  # task name -> recent run time of a body here


def chunk_size(task: str, wanted: int) -> int:
    """How many of ``wanted`` jobs of ``task`` to claim at once: one until a body has run."""
    seconds = _recent_seconds.get(task)
    if seconds is None:
        return 1
    return max(1, min(wanted, int(CHUNK_BUDGET / max(seconds, 1e-6))))


def observe(task: str, seconds: float) -> None:
    """Fold one body's run time into ``task``'s recent run time."""
    previous = _recent_seconds.get(task)
    _recent_seconds[task] = (
        seconds if previous is None else previous + SMOOTHING * (seconds - previous)
    )


@dataclass(frozen=True)
class Runner:
    """What a batch needs of its task (jobs.task.JobTask).

    ``context(job)`` makes a body's context; ``run_job(job, ctx)`` runs the body and returns
    ``(job, encoded result)`` on success (any other end it writes itself); ``ended(job,
    succeeded=…)`` is told of each end written here.
    """

    name: str
    context: Callable
    run_job: Callable
    ended: Callable


def run(task: Runner, ids: list[int], *, worker: str, plan: limiter.Plan | None) -> None:
    """Run the message's ``ids`` doorbells (see the module doc)."""
    wanted, successes = len(ids), []
    while wanted and not shutdown.requested():
        anchor = ids[len(ids) - wanted]  # a job the message names: its queue is the claim's
        count = chunk_size(task.name, wanted)
        settled, claimed = _settle_and_claim(task, successes, anchor, count, plan, worker)
        _tell(task, settled)
        wanted = wanted - count if len(claimed) == count else 0
        successes = _run_chunk(task, claimed)
    _tell(task, completer.succeed_many(successes))
    if wanted:  # a shutdown: leave the rest to other workers, at once
        _ring_again(ids[len(ids) - wanted], wanted)


def _settle_and_claim(task: Runner, successes, anchor: int, count: int, plan, worker: str):
    """Write ``successes`` and claim the next chunk; after a dropped connection (a database
    restart) write them on a new one, then claim: neither is lost with it. (Had the drop come
    after the commit, the chunk it claimed is left to its leases and the reaper.)"""
    try:
        return completer.succeed_many_and_claim(
            successes, anchor, count, plan=plan, task=task.name, worker=worker
        )
    except (OperationalError, InterfaceError):
        connection.close()
        settled = completer.succeed_many(successes)
        _, claimed = completer.succeed_many_and_claim(
            [], anchor, count, plan=plan, task=task.name, worker=worker
        )
        return settled, claimed


def _run_chunk(task: Runner, claimed: list[Job]) -> list[statements.Success]:
    """Run the chunk's bodies in order; return the successes, not yet written."""
    lease = keeper()
    contexts = [task.context(job) for job in claimed]
    for ctx in contexts:  # their leases are kept while they wait their turn
        lease.track(ctx)
    successes = []
    for position, ctx in enumerate(contexts):
        if shutdown.requested():
            _hand_back(contexts[position:])
            break
        if ctx.lost:  # taken away while it waited (the reaper, an operator)
            lease.untrack(ctx)
            continue
        started_at, clock = timezone.now(), time.monotonic()
        done = task.run_job(ctx.job, ctx)
        observe(task.name, time.monotonic() - clock)
        if done is not None:
            successes.append(statements.Success(*done, started_at, timezone.now()))
    return successes


def _hand_back(contexts) -> None:
    """End the runs of a chunk not started as ``worker_shutdown``: due now, no attempt spent."""
    lease = keeper()
    event = outcome.Event.lost(
        outcome.Happened.WORKER_SHUTDOWN, "the worker shut down before the run started"
    )
    for ctx in contexts:
        lease.untrack(ctx)
        completer.finish(outcome.decide(event, ctx.job), ctx.job)


def _tell(task: Runner, settled: list[tuple[Job, bool]]) -> None:
    for job, succeeded in settled:
        task.ended(job, succeeded=succeeded)


def _ring_again(anchor: int, doorbells: int) -> None:
    """Ring, for the queue of the message's job ``anchor``, the doorbells left unused."""
    from jobs.queues import ring

    queue = statements.queue_of(anchor)
    if queue is not None:
        ring(queue, limit=doorbells)
