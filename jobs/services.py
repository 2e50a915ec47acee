"""The job engine's services. Views, admin actions, commands and tasks all call these.

Each state change goes through ``jobs.transitions.transition`` and logs one structured line.
"""

import logging
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from jobs import conf
from jobs.errors import IllegalTransition, JobNotFound
from jobs.models import PENDING, AuditLog, Job, JobStatus, Notification
from jobs.publish import publish_on_commit
from jobs.signals import job_cancelled, job_dead
from jobs.transitions import transition, update_returning

logger = logging.getLogger("jobs")
S = JobStatus
# Tolerance for a retry message that reaches a worker a moment before its run_after.
CLAIM_CLOCK_SKEW = timedelta(seconds=1)
MAX_ERROR_LENGTH = 4000


def log_job(event: str, job: Job, **fields) -> None:
    """Log one structured line about ``job``."""
    logger.info(
        event,
        extra={
            "job_id": job.pk,
            "task": job.task,
            "queue": job.queue,
            "attempt": job.attempts,
            **fields,
        },
    )


def _task_defaults(task) -> tuple[str, str | None, int | None]:
    """Return (name, declared queue, declared max attempts) of a task object or name."""
    from project.celery import app

    name = task if isinstance(task, str) else task.name
    registered = app.tasks.get(name)
    if registered is None:
        raise ValueError(f"unknown task {name!r}: it is not registered with Celery")
    return name, getattr(registered, "queue", None), getattr(registered, "job_max_attempts", None)


def _new_job(
    task, payload, *, queue, priority, run_after, max_attempts, idempotency_key, now
) -> Job:
    name, task_queue, task_max_attempts = _task_defaults(task)
    return Job(
        task=name,
        queue=queue or task_queue or "default",
        payload=payload if payload is not None else {},
        priority=priority,
        max_attempts=max_attempts or task_max_attempts or conf.get().max_attempts,
        run_after=run_after or now,
        idempotency_key=idempotency_key,
        published_at=now,
        created_at=now,
        updated_at=now,
    )


def enqueue(
    task,
    payload: dict | None = None,
    *,
    queue: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    max_attempts: int | None = None,
    idempotency_key: str | None = None,
) -> Job:
    """Write a Job in the caller's transaction and publish its id once that commits.

    A repeated ``idempotency_key`` returns the existing job instead of a new one.
    """
    job = _new_job(
        task,
        payload,
        queue=queue,
        priority=priority,
        run_after=run_after,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        now=timezone.now(),
    )
    if idempotency_key is not None:
        existing = Job.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing
        try:
            with transaction.atomic():
                job.save(force_insert=True)
        except IntegrityError:
            # A concurrent caller inserted the same key first; theirs is the job.
            return Job.objects.get(idempotency_key=idempotency_key)
    else:
        job.save(force_insert=True)
    log_job("job.enqueued", job)
    publish_on_commit([job])
    return job


def enqueue_many(
    task,
    payloads: list[dict],
    *,
    queue: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    max_attempts: int | None = None,
    batch_size: int = 1000,
) -> list[Job]:
    """Write one job per payload with one bulk INSERT per batch; publish them on commit."""
    now = timezone.now()
    template = _new_job(
        task,
        None,
        queue=queue,
        priority=priority,
        run_after=run_after,
        max_attempts=max_attempts,
        idempotency_key=None,
        now=now,
    )
    jobs = [
        Job(
            task=template.task,
            queue=template.queue,
            payload=payload,
            priority=priority,
            max_attempts=template.max_attempts,
            run_after=template.run_after,
            published_at=now,
            created_at=now,
            updated_at=now,
        )
        for payload in payloads
    ]
    jobs = Job.objects.bulk_create(jobs, batch_size=batch_size)
    if jobs and jobs[0].pk is None:  # backends without RETURNING on bulk insert
        raise RuntimeError("enqueue_many needs a database that returns primary keys")
    logger.info(
        "job.enqueued_many",
        extra={"task": template.task, "queue": template.queue, "count": len(jobs)},
    )
    publish_on_commit(jobs)
    return jobs


def job_claim(job_id: int, *, worker: str) -> Job | None:
    """Take a due queued/retrying job for ``worker``: one UPDATE, attempts counted here.

    Returns None when someone else has it, it is finished or it is not due yet.
    """
    now = timezone.now()
    moved = transition(
        Q(pk=job_id, run_after__lte=now + CLAIM_CLOCK_SKEW),
        S.RUNNING,
        attempts=F("attempts") + 1,
        lease_expires_at=now + conf.get().lease_timeout,
        locked_by=worker,
        publish_count=0,
    )
    if not moved:
        return None
    log_job("job.claimed", moved[0], worker=worker)
    return moved[0]


def _this_run(job: Job) -> Q:
    """Match ``job`` only while it is still the same run (its attempt is the fencing token)."""
    return Q(pk=job.pk, attempts=job.attempts, locked_by=job.locked_by)


def job_complete(job: Job, result=None) -> Job | None:
    """Mark a running job succeeded; None if its lease was lost to the reaper meanwhile."""
    moved = transition(_this_run(job), S.SUCCEEDED, from_=[S.RUNNING], result=result, locked_by="")
    if not moved:
        log_job("job.complete_lost", job)
        return None
    log_job("job.succeeded", moved[0])
    return moved[0]


def job_heartbeat(job: Job) -> Job | None:
    """Extend a running job's lease; return the fresh row, or None if the run was lost."""
    now = timezone.now()
    queryset = Job.objects.filter(_this_run(job), status=S.RUNNING)
    rows = update_returning(
        queryset, {"lease_expires_at": now + conf.get().lease_timeout, "updated_at": now}
    )
    return rows[0] if rows else None


def job_retry_later(job: Job, *, error: str, delay: float) -> Job | None:
    """Move a failed run to ``retrying`` after ``delay`` seconds; the caller publishes it."""
    now = timezone.now()
    moved = transition(
        _this_run(job),
        S.RETRYING,
        from_=[S.RUNNING],
        run_after=now + timedelta(seconds=delay),
        last_error=error[:MAX_ERROR_LENGTH],
        lease_expires_at=None,
        locked_by="",
        published_at=now,
    )
    if moved:
        log_job("job.fail_retry", moved[0], error=error[:300], delay=round(delay, 3))
    return moved[0] if moved else None


def job_snooze(job: Job, *, seconds: float, reason: str = "") -> Job | None:
    """Put a running job back to wait ``seconds`` without spending an attempt."""
    now = timezone.now()
    moved = transition(
        _this_run(job),
        S.RETRYING,
        from_=[S.RUNNING],
        attempts=F("attempts") - 1,
        run_after=now + timedelta(seconds=seconds),
        lease_expires_at=None,
        locked_by="",
        published_at=now,
    )
    if moved:
        log_job("job.snoozed", moved[0], seconds=seconds, reason=reason)
        publish_on_commit(moved)
    return moved[0] if moved else None


def job_wake(job_id: int) -> Job | None:
    """Make a snoozed (``retrying``) job due now and publish it; None if it is not waiting.

    For callers that know the reason a job snoozed is gone (deployments wakes the next
    deployment of an environment when the one before it finishes). A job that is not
    waiting is left alone; a duplicate message is turned away by the claim.
    """
    now = timezone.now()
    rows = update_returning(
        Job.objects.filter(pk=job_id, status=S.RETRYING, run_after__gt=now),
        {"run_after": now, "updated_at": now, "published_at": now},
    )
    if not rows:
        return None
    log_job("job.woken", rows[0])
    publish_on_commit(rows)
    return rows[0]


def job_bury(where: Q, *, error: str, actor: str = "system") -> list[Job]:
    """Move running jobs matching ``where`` to ``dead`` and deliver their dead letters.

    The dead letter (AuditLog row, one Notification per active staff user, the ``job_dead``
    signal) is written in the same transaction as the state change.
    """
    with transaction.atomic():
        moved = transition(
            where, S.DEAD, from_=[S.RUNNING], last_error=error[:MAX_ERROR_LENGTH], locked_by=""
        )
        for job in moved:
            _dead_letter(job, actor=actor)
    return moved


def _dead_letter(job: Job, *, actor: str) -> None:
    log_job("job.dead", job, error=job.last_error[:300])
    AuditLog.objects.create(
        actor=actor,
        action="job.dead",
        target_type="job",
        target_id=str(job.pk),
        details={"task": job.task, "attempts": job.attempts, "error": job.last_error[:1000]},
    )
    notify_staff(
        topic=notice_topic(job),
        title=f"{job.task} job {job.pk} is dead after {job.attempts} attempt(s)",
        body=job.last_error[:2000],
        data={"job_id": job.pk, "task": job.task},
    )
    job_dead.send(sender=Job, job=job)


def staff_ids() -> list[int]:
    """Return the ids of the active staff users: the operators every notice goes to."""
    return list(
        get_user_model().objects.filter(is_staff=True, is_active=True).values_list("pk", flat=True)
    )


def notify_staff(*, topic: str, title: str, body: str = "", data: dict | None = None) -> int:
    """Put one in-app Notification in every active staff user's inbox; return how many."""
    notices = Notification.objects.bulk_create(
        Notification(recipient_id=user_id, topic=topic, title=title, body=body, data=data or {})
        for user_id in staff_ids()
    )
    return len(notices)


def notice_topic(job: Job) -> str:
    """Name the in-app notice for a dead job: ``webhook.dead_letter`` or ``job.dead``."""
    return "webhook.dead_letter" if job.task.startswith("webhooks.") else "job.dead"


def job_cancel(job_id: int, *, actor: str) -> Job:
    """Cancel a waiting job at once, or ask a running one to stop (``cancel_requested``).

    A waiting job's cancel sends ``job_cancelled`` in the same transaction, so the app that
    owns the job (deployments) can follow.
    """
    with transaction.atomic():
        moved = transition(Q(pk=job_id), S.CANCELLED, from_=PENDING)
        if moved:
            job = moved[0]
            log_job("job.cancelled", job, actor=actor)
            job_cancelled.send(sender=Job, job=job, actor=actor)
        else:
            now = timezone.now()
            rows = update_returning(
                Job.objects.filter(pk=job_id, status=S.RUNNING),
                {"cancel_requested_at": now, "updated_at": now},
            )
            if not rows:
                raise _not_found_or_illegal(job_id, "cancel")
            job = rows[0]
            log_job("job.cancel_requested", job, actor=actor)
        AuditLog.objects.create(
            actor=actor,
            action="job.cancel",
            target_type="job",
            target_id=str(job_id),
            details={"status": job.status},
        )
    return job


def job_finish_cancelled(job: Job) -> Job | None:
    """Record that a running job stopped because it was asked to."""
    moved = transition(_this_run(job), S.CANCELLED, from_=[S.RUNNING], locked_by="")
    if moved:
        log_job("job.cancelled", moved[0])
    return moved[0] if moved else None


def job_retry(job_id: int, *, actor: str) -> Job:
    """Give a dead or cancelled job a fresh attempt budget and queue it again."""
    now = timezone.now()
    with transaction.atomic():
        moved = transition(
            Q(pk=job_id),
            S.QUEUED,
            attempts=0,
            run_after=now,
            finished_at=None,
            started_at=None,
            cancel_requested_at=None,
            result=None,
            published_at=now,
            publish_count=0,
        )
        if not moved:
            raise _not_found_or_illegal(job_id, "retry")
        job = moved[0]
        AuditLog.objects.create(
            actor=actor,
            action="job.retry",
            target_type="job",
            target_id=str(job_id),
            details={"task": job.task, "previous_error": job.last_error[:1000]},
        )
        log_job("job.retried", job, actor=actor)
        publish_on_commit([job])
    return job


def _not_found_or_illegal(job_id: int, action: str) -> Exception:
    status = Job.objects.filter(pk=job_id).values_list("status", flat=True).first()
    if status is None:
        return JobNotFound(f"job {job_id} does not exist")
    return IllegalTransition(f"cannot {action} job {job_id}: it is {status}")
