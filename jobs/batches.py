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
its chunk before it is written, and a claimed job waits in this process while the ones
before it run, both with their leases kept by the lease keeper. A chunk still running after
``OVERRUN`` (a body far slower than its task's recent ones) writes its successes so far and
gives the jobs it has not started back (``jobs.completer.hand_back``: queued again at once,
their attempts given back), so a pause, a cancel, a limit's other claimants and idle workers
see them again at once; a warm shutdown gives them back too, and rings the message's unused
doorbells again for its queue. A job claimed but not started when its worker is killed is
recovered as any run lost with its worker is (its attempt counted, as River and Oban count
a fetched job's).

Under a limit that counts only slots (a queue's, a task's ``concurrency``) a chunk is
claimed under one lock, and only while the free slots are at least twice the chunk (else
one job: a chunk must not take a nearly full limit's last slots to run them one after
another); a rate, a key rule or fairness claims one job at a time (jobs.limiter).
"""

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from jobs import completer, limiter, shutdown, statements
from jobs.lease import keeper
from jobs.models import Job
from jobs.publish import publish

logger = logging.getLogger("jobs")

# How long, by its bodies' recent run times, a chunk is expected to run.
CHUNK_BUDGET = 0.05
# A chunk still running after this long gives the jobs it has not started back.
OVERRUN = 2 * CHUNK_BUDGET
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


def run(
    task: Runner,
    ids: list[int],
    *,
    worker: str,
    plan: limiter.Plan | None,
    held: Sequence[Job] = (),
) -> None:
    """Run the message's ``ids`` doorbells (see the module doc).

    Then, as many doorbells again for the jobs of the same task and queue that the
    message's ends released (a workflow's next step or callback, written by a chunk's
    successes here): the message claims the best runnable jobs of its task and queue for
    them, so they need not wait for a doorbell to reach a free worker. Those its last chunk
    released get no doorbell of their own until its next claim (``ring_released``; earlier
    ones do, as other workers may be idle): the message owes them one, and sends it for each
    that claim did not take (a chunk of one for slow bodies, other jobs first, a limit or a
    pause refusing it), or when a shutdown or an error ends it first. A worker killed
    meanwhile leaves them to the sweeper. ``held``: ``ids`` are such jobs already
    (jobs.task's single path), owed as well.
    """
    wanted, ran, queue = len(ids), _Ran(), None
    owed = {job.pk: job for job in held}  # released here, no doorbell yet
    own = not held  # ``ids`` are the message's own doorbells
    try:
        while wanted:
            freed: list[Job] = []
            while wanted and not shutdown.requested():
                # The first is a job the message names (its queue is the claim's). A rate
                # that refuses the claim rings the message's own unused doorbells again; the
                # jobs it released and claims for are owed theirs (``owed``, rung below) or
                # were rung already, so then it rings none.
                unused = ids[len(ids) - wanted :]
                doorbells = unused if own else ()
                count = chunk_size(task.name, wanted)
                settled, claimed = _settle_and_claim(
                    task, ran, unused[0], count, plan, worker, freed, doorbells
                )
                for job in claimed:
                    owed.pop(job.pk, None)
                _ring_owed(owed)  # not in this chunk: another worker may take them meanwhile
                _tell(task, settled)
                wanted = wanted - len(claimed) if claimed else 0  # none: nothing runnable now
                queue = queue or (claimed[0].queue if claimed else None)
                ran = _run_chunk(task, claimed)
            last: list[Job] = []
            try:
                _tell(task, ran.write(last, ring_released=False))
            finally:
                freed += last
                owed.update((job.pk, job) for job in following(last, task.name, queue))
            if wanted:  # a shutdown
                break
            ids, own = [job.pk for job in following(freed, task.name, queue)], False
            wanted = len(ids)
    except BaseException:  # the database went away: the unwritten runs are the reaper's
        ran.written()
        raise
    finally:
        _ring_owed(owed)
    if wanted and own:  # a shutdown: leave the rest to other workers, at once
        _ring_again(task.name, ids[len(ids) - wanted], wanted)


def following(freed: list[Job], task: str, queue: str | None) -> list[Job]:
    """The ``freed`` (released) jobs that are of ``task`` in ``queue``."""
    return [job for job in freed if (job.task, job.queue) == (task, queue)]


def ring_owed(jobs: list[Job]) -> None:
    """Send the doorbells of released jobs held for a message that will not claim them. A
    failure is logged, never raised: the successes written meanwhile must still be told (or
    the error that ended the message reported), and the sweeper re-sends what did not go
    out."""
    if not jobs:
        return
    try:
        publish(jobs)
    except Exception as exc:
        logger.warning("job.publish_failed", extra={"error": repr(exc), "published": 0})


def _ring_owed(owed: dict[int, Job]) -> None:
    jobs = list(owed.values())
    owed.clear()  # first: whatever happens next, none is rung twice
    ring_owed(jobs)


class _Ran:
    """A chunk's successes not yet written; their runs' leases are kept until they are."""

    def __init__(self) -> None:
        self.successes: list[statements.Success] = []
        self.contexts: list = []

    def add(self, success: statements.Success, ctx) -> None:
        keeper().track(ctx)
        self.successes.append(success)
        self.contexts.append(ctx)

    def written(self) -> None:
        lease = keeper()
        for ctx in self.contexts:
            lease.untrack(ctx)
        self.successes, self.contexts = [], []

    def write(
        self, released: list[Job] | None = None, *, ring_released: bool = True
    ) -> list[tuple[Job, bool]]:
        """Write the successes on their own (no claim after them); ``released`` and
        ``ring_released``: see ``completer.succeed_many``."""
        settled = completer.succeed_many(
            self.successes, released=released, ring_released=ring_released
        )
        self.written()
        return settled


def _settle_and_claim(
    task: Runner,
    ran: _Ran,
    anchor: int,
    count: int,
    plan,
    worker: str,
    released: list[Job],
    doorbells: Sequence[int],
):
    """Write ``ran``'s successes and claim the next chunk for ``anchor``'s doorbell (with
    ``doorbells``, rung again if a rate refuses the claim: jobs.limiter); after a dropped
    connection (a database restart) write them on a new one, then claim: neither is lost
    with it. (Had the drop come after the commit, the chunk it claimed is left to its leases
    and the reaper, and a rate's refusal may ring ``doorbells`` twice: a drop is far likelier
    before the commit, whose refusal rang nothing.)"""
    claim = {"plan": plan, "task": task.name, "worker": worker}
    try:
        settled, claimed = completer.succeed_many_and_claim(
            ran.successes, anchor, count, released=released, doorbells=doorbells, **claim
        )
        ran.written()
        return settled, claimed
    except (OperationalError, InterfaceError):
        connection.close()
        settled = ran.write(released)
        _, claimed = completer.succeed_many_and_claim(
            [], anchor, count, doorbells=doorbells, **claim
        )
        return settled, claimed


def _run_chunk(task: Runner, claimed: list[Job]) -> _Ran:
    """Run the chunk's bodies in order; return the successes, not yet written.

    A chunk that runs past twice its budget (a body far slower than its task's recent ones)
    writes the successes so far and gives the jobs not started back at once, to be claimed
    afresh: by then a pause, a cancel, a limit's other claimants or idle workers may want
    them. A warm shutdown gives them back too.
    """
    lease = keeper()
    contexts = [task.context(job) for job in claimed]
    for ctx in contexts:  # their leases are kept while they wait their turn
        lease.track(ctx)
    ran, began = _Ran(), time.monotonic()
    try:
        _run_in_turn(task, contexts, ran, began)
    except BaseException:  # the database went away mid-chunk: its runs are the reaper's now
        for ctx in contexts + ran.contexts:
            lease.untrack(ctx)
        raise
    return ran


def _run_in_turn(task: Runner, contexts: list, ran: "_Ran", began: float) -> None:
    lease = keeper()
    for position, ctx in enumerate(contexts):
        overran = position and time.monotonic() - began > OVERRUN
        if overran or shutdown.requested():
            _tell(task, ran.write())
            _hand_back(contexts[position:])
            break
        if ctx.lost:  # taken away while it waited (the reaper, an operator)
            lease.untrack(ctx)
            continue
        started_at, clock = timezone.now(), time.monotonic()
        done = task.run_job(ctx.job, ctx)
        observe(task.name, time.monotonic() - clock)
        if done is not None:
            ran.add(statements.Success(*done, started_at, timezone.now()), ctx)


def _hand_back(contexts) -> None:
    """Give the chunk's jobs not started back: queued at once, no attempt spent."""
    lease = keeper()
    for ctx in contexts:
        lease.untrack(ctx)
    completer.hand_back([ctx.job for ctx in contexts if not ctx.lost])


def _tell(task: Runner, settled: list[tuple[Job, bool]]) -> None:
    for job, succeeded in settled:
        task.ended(job, succeeded=succeeded)


def _ring_again(task: str, anchor: int, doorbells: int) -> None:
    """Ring the doorbells left unused, for ``task``'s jobs in the queue of the message's job
    ``anchor`` (a doorbell claims its own task's jobs only)."""
    from jobs.queues import ring

    queue = statements.queue_of(anchor)
    if queue is not None:
        ring(queue, task=task, limit=doorbells)
