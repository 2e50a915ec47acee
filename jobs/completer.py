"""The only writer of a run's end: every success, retry, snooze, dead, cancel, lost, reaped and
handed-back run is written here.

jobs.outcome decides what becomes of a run; ``finish(decision, job)`` makes it so with one
fenced statement (jobs.statements: the run's id, attempt and worker, per vendor), appending
the attempt to the job's history in that same statement. Then, in the same transaction, it
announces the end: a log line, a retry published once the change commits, a dead job's dead
letter. A run whose end is refused because a cancel was asked for meanwhile ends
``cancelled`` instead, never retried; a run that is no longer ``job``'s (the reaper or an
operator got there first) is left alone and ``finish`` returns None.

A batch message (jobs.batches) writes a chunk's successes together, with the claim of the
next chunk (``succeed_many_and_claim``): one statement on PostgreSQL for both; under a
limit, one transaction.
"""

import json
from collections import Counter
from collections.abc import Sequence
from copy import copy
from datetime import datetime
from functools import partial

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs import attempts, claim_at_once, conf, limiter, limits, prepared, statements
from jobs.models import Job, JobReason, JobStatus, QueueState, TaskState
from jobs.outcome import Decision
from jobs.publish import publish_on_commit
from jobs.queues import ring, ring_task
from jobs.services.base import MAX_ERROR_LENGTH, log_job
from jobs.services.operator import cancel_waiting

R = JobReason
S = JobStatus


def ending(
    decision: Decision, *, lease_expired_before: datetime | None = None
) -> statements.Ending:
    """Translate ``decision`` into the column values its statement writes."""
    error = decision.error
    result = decision.result
    if decision.status == S.CANCELLED and result is not None and not isinstance(result, str):
        result = json.dumps(result)
    keeps_result = decision.status in (S.SUCCEEDED, S.CANCELLED)
    return statements.Ending(
        status=decision.status,
        reason=decision.reason,
        result=result if keeps_result else None,
        last_error=attempts.describe(error)[:MAX_ERROR_LENGTH] if error is not None else None,
        run_after=decision.run_after if decision.status == S.RETRYING else None,
        refund=decision.refund,
        recorded=decision.recorded,
        error=error,
        cancels=decision.status == S.CANCELLED,
        lease_expired_before=lease_expired_before,
    )


def finish(
    decision: Decision,
    job: Job,
    *,
    lease_expired_before: datetime | None = None,
    actor: str = "system",
) -> Job | None:
    """End the run of ``job`` as ``decision`` says; return the job as it is now, or None.

    ``lease_expired_before`` (the reaper) also requires the lease to have run out by then;
    ``actor`` signs a dead letter.
    """
    end = ending(decision, lease_expired_before=lease_expired_before)
    # The hot path: one statement, nothing to announce (a workflow's node: see _advance).
    if decision.status == S.SUCCEEDED and job.workflow_id is None:
        done = statements.end(job, end)
        if done is None:
            return _cancelled_meanwhile(decision, job, lease_expired_before)
        _ring_if_limited(done)
        return done
    with transaction.atomic():
        done = statements.end(job, end)
        if done is None:
            return _cancelled_meanwhile(decision, job, lease_expired_before)
        _announce(done, decision, actor=actor)
        _advance(done)
        _ring_if_limited(done)
    return done


def succeed(job: Job, encoded: str) -> bool:
    """Write the success of ``job``'s run (inside an atomic body's transaction); False if refused.

    A refused success is left to ``finish`` once that transaction is rolled back.
    """
    done = statements.end(job, ending(Decision(S.SUCCEEDED, result=encoded)))
    if done is None:
        return False
    _advance(done)
    _ring_if_limited(done)  # once the body's transaction commits
    return True


def succeed_many_and_claim(
    successes: list[statements.Success],
    job_id: int,
    count: int,
    *,
    plan: limiter.Plan | None,
    task: str,
    worker: str,
    released: list[Job] | None = None,
    doorbells: Sequence[int] | None = None,
) -> tuple[list[tuple[Job, bool]], list[Job]]:
    """Write a chunk's successes and claim up to ``count`` jobs for ``job_id``'s doorbell.

    One statement on PostgreSQL. When a success is a workflow's node, that statement and then
    the release of its dependants (jobs.workflows), last, in one transaction. Under
    ``plan``'s limits, one transaction, the successes first, so a limited claim's count sees
    their slots free.
    Return each success's run as it ended with whether it succeeded (a cancel asked for
    meanwhile ends it cancelled; a run taken away is left out), and the jobs claimed, best
    first. ``released``: a list to add the jobs these ends released to (workflows'
    dependants now queued: the claim came before their release and did not see them).
    ``doorbells``: what a rate that refuses the claim rings again (jobs.limiter's
    ``claim_reading_holds``).
    """
    if plan is None and not _any_workflow(successes):
        ended, claimed = statements.end_successes_and_claim(
            successes, job_id, task=task, worker=worker, count=count
        )
        return _settled(successes, ended, rings=True), claimed
    if plan is not None and claim_at_once.applies(plan) and not _any_workflow(successes):
        return _succeed_many_and_claim_at_once(successes, job_id, count, plan, task, worker)
    if plan is None and successes and _in_one_message():  # a workflow's nodes
        statement = statements.successes_and_claim_statement(successes, job_id, task, worker, count)
        rows = _end_and_advance(statement, successes, released, held=None)
        ended, claimed = statements.read_successes_and_claim(rows)
        return _settled(successes, ended, rings=True), claimed

    def write():
        with transaction.atomic():
            if plan is None:  # still one statement for both
                holds = None
                ended, claimed = statements.end_successes_and_claim(
                    successes, job_id, task=task, worker=worker, count=count
                )
                for success in successes:
                    if success.job.pk in ended:
                        _succeeded(success)
            else:
                ended = _end_successes(successes)
                claimed, holds = limiter.claim_reading_holds(
                    plan, job_id, task=task, worker=worker, count=count, doorbells=doorbells
                )
            # Last before the commit: the dependants' row locks are held for as short as can be.
            ended_jobs = [success.job for success in successes if success.job.pk in ended]
            freed = _advance(*ended_jobs)
            _ring_for(ended_jobs, holds)
        return ended, claimed, freed

    ended, claimed, freed = _once_more_if_lost(write, successes)
    if released is not None:
        released.extend(freed)
    return _settled(successes, ended, rings=False), claimed


def _succeed_many_and_claim_at_once(successes, job_id, count, plan, task, worker):
    """``succeed_many_and_claim`` under limits decided in SQL: the successes, the lock and
    the claim in one round trip and one transaction (jobs.claim_at_once)."""
    claimed = claim_at_once.claim(
        plan,
        job_id,
        task=task,
        worker=worker,
        count=count,
        before=statements.successes_statement(successes) if successes else None,
    )
    ended = {row[0] for row in claimed.before}
    if claimed.locked:
        jobs = claimed.jobs
        holds = limiter.Holds(claimed.queue, claimed.queue_held, claimed.task_held)
    else:  # the lock read no row (a state row missing, or the job gone): the successes are
        # written; claim as the limiter does (it makes missing rows)
        with transaction.atomic():
            jobs, holds = limiter.claim_reading_holds(
                plan, job_id, task=task, worker=worker, count=count
            )
    return _settled(successes, ended, rings=True, holds=holds), jobs


def succeed_many(
    successes: list[statements.Success],
    *,
    released: list[Job] | None = None,
    ring_released: bool = True,
) -> list[tuple[Job, bool]]:
    """Write a chunk's successes with no claim after them (the message's last chunk).

    ``released`` (as for ``succeed_many_and_claim``): a list to add the jobs that these ends
    released (workflows' dependants now queued) to. ``ring_released=False``: the caller
    claims as many jobs of the successes' task and queue at once (jobs.batches), so their
    released jobs of that task and queue get no doorbell; it rings for what it leaves.
    """
    if not successes:
        return []
    held = _held_by(successes) if released is not None and not ring_released else None
    if connection.vendor == "postgresql" and not _any_workflow(successes):  # one statement
        watched = _watched(successes)
        if watched is None:
            return _settled(successes, statements.end_successes(successes), rings=True)
        task, queue = watched
        ended, task_held, queue_held = statements.end_successes_reading_marks(
            successes, task=task, queue=queue
        )
        holds = limiter.Holds(
            queue=successes[0].job.queue, queue_held=queue_held, task_held=task_held
        )
        return _settled(successes, ended, rings=True, holds=holds)
    if _in_one_message():  # a workflow's nodes
        statement = statements.successes_statement(successes)
        rows = _end_and_advance(statement, successes, released, held=held)
        return _settled(successes, {row[0] for row in rows}, rings=True)

    def write():
        with transaction.atomic():  # one per success elsewhere; a workflow's release with them
            ended = _end_successes(successes)
            ended_jobs = [success.job for success in successes if success.job.pk in ended]
            freed = _advance(*ended_jobs, held=held)
            _ring_for(ended_jobs)
        return ended, freed

    ended, freed = _once_more_if_lost(write, successes)
    if released is not None:
        released.extend(freed)
    return _settled(successes, ended, rings=False)


def _in_one_message() -> bool:
    from jobs.workflows.release import in_one_message

    return in_one_message()


def _end_and_advance(statement, successes, released: list[Job] | None, *, held) -> list[tuple]:
    """Write ``statement`` (the successes of workflows' nodes, and perhaps a claim) and
    release what they unblock, in one transaction of two round trips (jobs.workflows);
    return the statement's rows."""
    from jobs.workflows.release import end_and_advance

    rows, freed = end_and_advance(*statement, [success.job for success in successes], held=held)
    if released is not None:
        released.extend(freed)
    return rows


def _held_by(successes):
    """The released jobs a message claims itself after its last chunk: those of the
    successes' task and queue (jobs.batches)."""
    kind = (successes[0].job.task, successes[0].job.queue)
    return lambda job: (job.task, job.queue) == kind


def _any_workflow(successes) -> bool:
    return any(success.job.workflow_id is not None for success in successes)


def _once_more_if_lost(write, successes: list[statements.Success]):
    """Run ``write``, one transaction that ends ``successes``' runs. If the server lost or
    outdated a prepared statement it sent (jobs.prepared), that transaction was rolled back
    whole, nothing written: run it once more, as text, the runs as they were before it."""
    before = [copy(success.job) for success in successes]

    def as_before() -> None:  # what _succeeded changed
        for success, job in zip(successes, before, strict=True):
            success.job.__dict__.update(job.__dict__)

    return prepared.once_more_as_text(write, before_again=as_before)


def _end_successes(successes) -> set[int]:
    """Write the successes in the caller's transaction (which then advances the workflows
    they end: ``_advance``)."""
    ended = statements.end_successes(successes)
    for success in successes:
        if success.job.pk in ended:
            _succeeded(success)
    return ended


def _succeeded(success: statements.Success) -> None:
    """Make the in-memory job what its row became (its result is read again if needed)."""
    job = success.job
    job.status, job.locked_by, job.lease_expires_at = S.SUCCEEDED, "", None
    job.started_at, job.finished_at = success.started_at, success.finished_at


def _watched(successes) -> tuple[str | None, str | None] | None:
    """The limited task and queue whose refusal marks the successes' statement should read
    (None for one not limited), or None when neither is (or the runs are of several)."""
    from project.celery import app

    first = successes[0].job
    if any((s.job.task, s.job.queue) != (first.task, first.queue) for s in successes):
        return None
    limit = limits.limit_of(app.tasks.get(first.task))
    task = first.task if limit is not None and limit.frees_slots else None
    queue = first.queue if first.queue in conf.get().queue_concurrency else None
    return None if task is None and queue is None else (task, queue)


def _settled(
    successes, ended: set[int], *, rings: bool, holds: limiter.Holds | None = None
) -> list[tuple[Job, bool]]:
    """The runs of ``successes`` as they ended: written, or cancelled meanwhile, or gone.

    ``rings``: a written end still has to ring for its limited task's next job (``holds``:
    the marks its statement read, if it read them).
    """
    settled = []
    if rings:
        _ring_for([success.job for success in successes if success.job.pk in ended], holds)
    for success in successes:
        job = success.job
        if job.pk in ended:
            _succeeded(success)
            settled.append((job, True))
            continue
        decision = Decision(S.SUCCEEDED, result=success.result)
        cancelled = _cancelled_meanwhile(decision, job, None)
        if cancelled is not None:
            settled.append((cancelled, False))
    return settled


def hand_back(jobs: list[Job]) -> int:
    """Give back claimed runs whose bodies never started (jobs.batches: a chunk that ran past
    its budget, or a warm shutdown): queued again at once, their attempts given back, their
    doorbells rung. A run whose cancel was asked for while it waited in its chunk is
    cancelled instead (queued with the request, no claim would ever take it). Return how
    many were given back."""
    with transaction.atomic():
        given = statements.hand_back(jobs)
        cancelled = _cancel_asked_for(given)
    queued = [job for job in given if job.pk not in cancelled]
    for job in queued:
        job.status, job.locked_by = S.QUEUED, ""
    publish_on_commit(queued)
    _ring_for(given)
    return len(given)


def _cancel_asked_for(jobs: list[Job]) -> set[int]:
    """Cancel those of ``jobs`` (just given back, not started) whose cancel was asked for, as
    an operator's cancel of a waiting job does; return their ids."""
    asked = Q(pk__in=[job.pk for job in jobs], cancel_requested_at__isnull=False)
    moved = cancel_waiting(asked, actor="system")
    return {job.pk for job in moved}


def log_success(job: Job) -> None:
    """Log a success, if ``CONVEYOR_JOB_LOG_SUCCESS`` asks for it."""
    if conf.get().log_success:
        log_job("job.succeeded", job)


def _cancelled_meanwhile(
    decision: Decision, job: Job, lease_expired_before: datetime | None
) -> Job | None:
    """End the run ``cancelled`` if a cancel was asked for since it was claimed, else None.

    A cancel request reaches a running body only through its lease keeper or a heartbeat,
    so the run's end may be decided before the body heard of it; the fenced UPDATE then
    finds ``cancel_requested_at`` set, and the run ends cancelled after all, never retried.
    """
    if decision.status == S.CANCELLED:
        log_job("job.outcome_lost", job, status=decision.status, reason=decision.reason)
        return None
    result = decision.result if decision.status == S.SUCCEEDED else None
    cancelled = Decision(S.CANCELLED, R.CANCELLED, error=decision.error, result=result)
    with transaction.atomic():
        done = statements.end(job, ending(cancelled, lease_expired_before=lease_expired_before))
        if done is None:
            log_job("job.outcome_lost", job, status=decision.status, reason=decision.reason or "")
            return None
        _announce(done, cancelled)
        _advance(done)
        _ring_if_limited(done)
    return done


def _advance(*jobs: Job, held=None) -> list[Job]:
    """Workflows' nodes ended: release what they unblock, in the transaction of their end;
    return the jobs released (``held``: see jobs.workflows.release.advance)."""
    if not any(job.workflow_id is not None for job in jobs):
        return []
    from jobs.workflows.release import advance  # jobs.workflows imports the services

    return advance(*jobs, held=held)


def _ring_for(jobs: list[Job], holds: limiter.Holds | None = None) -> None:
    """Ring once per task and queue of the ended ``jobs``, for as many slots as they freed."""
    freed = Counter((job.task, job.queue) for job in jobs)
    first = {(job.task, job.queue): job for job in reversed(jobs)}
    for key, job in first.items():
        _ring_if_limited(job, holds, freed=freed[key])


def _ring_if_limited(job: Job, holds: limiter.Holds | None = None, *, freed: int = 1) -> None:
    """A run of a limited queue or task ended: a slot is free, so ring for the next one now.

    Its held-back jobs' own doorbells were dropped while the slots were full; without this
    they would wait for the sweeper. Only a claim refused since the last end makes it ring
    (jobs.limiter.wake). A task's limit spans its queues: the task's best due job of every
    queue is rung for (jobs.queues.ring_task), not only the freed run's queue's. ``holds``:
    the marks a claim in the same transaction read under its lock after this end (a mark it
    saw clear needs no wake). ``freed``: how many runs of the task in this queue just ended
    (a chunk's successes): as many doorbells go to the queue.
    """
    from project.celery import app

    known = holds is not None and holds.queue == job.queue
    limit = limits.limit_of(app.tasks.get(job.task))
    if limit is not None and limit.frees_slots and (not known or holds.task_held):
        ring_freed = partial(_ring_task_freed, job.task, job.queue, freed)
        transaction.on_commit(lambda: limiter.wake(TaskState, job.task, ring_freed), robust=True)
    queue_limits = conf.get().queue_concurrency
    if job.queue in queue_limits and (not known or holds.queue_held):
        ring_best = partial(ring, job.queue, limit=freed)
        transaction.on_commit(lambda: limiter.wake(QueueState, job.queue, ring_best), robust=True)


def _ring_task_freed(task: str, queue: str, freed: int) -> int:
    """The best due job of ``task`` in each queue, and ``freed - 1`` more in ``queue``."""
    rung = ring_task(task)
    if freed > 1:
        rung += ring(queue, task=task, limit=freed - 1)
    return rung


def _announce(job: Job, decision: Decision, *, actor: str = "system") -> None:
    """Log the end; publish a retry on commit; deliver a dead letter."""
    fields = {"reason": decision.reason, "error": job.last_error[:300]}
    if decision.status == S.RETRYING:
        delay = max(0.0, (job.run_after - timezone.now()).total_seconds())
        event = "job.snoozed" if decision.reason == R.SNOOZED else "job.fail_retry"
        log_job(event, job, delay=round(delay, 3), **fields)
        publish_on_commit([job])
    elif decision.status == S.CANCELLED:
        log_job("job.cancelled", job, **fields)
    elif decision.status == S.DEAD:
        from jobs.services.dead_letters import dead_letter

        dead_letter(job, actor=actor)
