"""Write jobs in the caller's transaction and publish their ids once it commits."""

import math
from datetime import datetime

from celery import Task
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs import conf
from jobs.limits import Limit, limit_of
from jobs.models import Job
from jobs.publish import publish_on_commit
from jobs.services.base import log_job, logger
from jobs.unique import Unique, check_rule, insert, stamp
from project.constraints import violates

# Django's range for django.tasks priorities; higher runs first (jobs.statements' claim).
MIN_PRIORITY, MAX_PRIORITY = -100, 100
QUEUE_LENGTH = Job._meta.get_field("queue").max_length
MAX_ATTEMPTS = 2**31 - 1  # the column's range


def validate_priority(priority: object) -> int:
    """Return ``priority`` if it is an integer in −100…100; raise a clear ValueError if not."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"a job's priority is an integer, not {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(
            f"a job's priority is between {MIN_PRIORITY} and {MAX_PRIORITY} (higher runs "
            f"first), not {priority}"
        )
    return priority


def validate_payload(payload: object) -> dict:
    """Return ``payload`` if it is a dict a job can store; raise a clear ValueError if not.

    Its values are JSON's: text, numbers (finite), booleans, None, lists and dicts. A NUL
    character (``\\x00``) is refused on every database, as PostgreSQL's jsonb does.
    """
    if not isinstance(payload, dict):
        raise ValueError(f"a job's payload is a dict, not {type(payload).__name__}")
    try:
        _check_stored(payload)
    except RecursionError:
        raise ValueError("a job's payload is nested too deeply to store") from None
    return payload


def _check_stored(value) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("a job's payload cannot hold a NUL character (\\x00)")
    elif isinstance(value, dict):
        for key, item in value.items():
            if key is not None and not isinstance(key, str | int | float):  # bool is an int
                raise ValueError(
                    f"a job's payload has a {type(key).__name__} key, which JSON cannot store"
                )
            _check_stored(key)
            _check_stored(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_stored(item)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a job's payload holds {value}, which JSON cannot store")
    elif value is not None and not isinstance(value, int):  # bool is an int
        raise ValueError(
            f"a job's payload holds a {type(value).__name__}, which JSON cannot store "
            "(use text, numbers, booleans, None, lists and dicts)"
        )


def placement(
    queue: str | None,
    task_queue: str | None,
    max_attempts: int | None,
    task_max_attempts: int | None,
) -> tuple[str, int]:
    """The queue and attempt budget a job gets: those given, else its task's, else the
    defaults; checked (``validate_placement``)."""
    queue = queue or task_queue or "default"
    max_attempts = max_attempts or task_max_attempts or conf.get().max_attempts
    validate_placement(queue, max_attempts)
    return queue, max_attempts


def validate_placement(queue: object, max_attempts: object) -> None:
    """Raise a clear ValueError unless ``queue`` is a name a job row can hold and
    ``max_attempts`` a count of at least 1."""
    if not isinstance(queue, str) or not 0 < len(queue) <= QUEUE_LENGTH:
        raise ValueError(
            f"a job's queue is a name of 1 to {QUEUE_LENGTH} characters, not {queue!r:.120}"
        )
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise ValueError(f"a job's max_attempts is an integer, not {type(max_attempts).__name__}")
    if not 1 <= max_attempts <= MAX_ATTEMPTS:
        raise ValueError(
            f"a job's max_attempts is between 1 and {MAX_ATTEMPTS}, not {max_attempts}"
        )


def _task_defaults(
    task: Task | str,
) -> tuple[str, str | None, int | None, Unique | None, Limit | None]:
    """Return (name, queue, declared max attempts, unique rule, limit) of a task or name."""
    from jobs.task import JobTask
    from project.celery import app

    name = task if isinstance(task, str) else task.name
    registered = app.tasks.get(name)
    if registered is None:  # a web process has not imported the apps' tasks.py modules yet
        app.loader.import_default_modules()
        registered = app.tasks.get(name)
    if registered is None:
        raise ValueError(
            f"unknown task {name!r}: it is not registered with Celery (define it in the "
            "tasks.py of an app in INSTALLED_APPS)"
        )
    if not isinstance(registered, JobTask):  # it would be called with a job id it can't take
        raise ValueError(
            f"task {name!r} is a plain Celery task: a job's task is a JobTask "
            "(@shared_task(base=JobTask)) or a django.tasks task"
        )
    queue = getattr(registered, "queue", None)
    if queue is None:  # the task's route (CELERY_TASK_ROUTES), else the default queue
        routed = app.amqp.router.route({}, name).get("queue")
        queue = getattr(routed, "name", routed)
    rule = getattr(registered, "unique", None)
    return name, queue, getattr(registered, "job_max_attempts", None), rule, limit_of(registered)


def _rule(declared: Unique | None, given: Unique | bool | None, task: str) -> Unique | None:
    """The rule in force: the one given to enqueue, else the task's; False turns it off."""
    if given is False:
        return None
    if given is None or given is True:
        if declared is not None:  # checked at start-up; a task module loaded later is not
            check_rule(task, declared)
        if given is True and declared is None:
            return Unique()
        return declared
    if not isinstance(given, Unique):
        raise ValueError(f"unique is a jobs.Unique, True, False or None, not {given!r}")
    problem = given.problem()
    if problem is not None:
        raise ValueError(f"task {task!r}: unique rule: {problem}")
    return given


def _new_job(
    task, payload, *, queue, priority, run_after, max_attempts, idempotency_key, now
) -> tuple[Job, Unique | None, Limit | None]:
    """An unsaved job of ``task``, with the task's unique rule and limit."""
    payload = validate_payload(payload) if payload is not None else {}
    validate_priority(priority)
    name, task_queue, task_max_attempts, rule, limit = _task_defaults(task)
    queue, max_attempts = placement(queue, task_queue, max_attempts, task_max_attempts)
    job = Job(
        task=name,
        queue=queue,
        payload=payload,
        limit_key=_limit_key(limit, payload),
        priority=priority,
        max_attempts=max_attempts,
        run_after=run_after or now,
        idempotency_key=idempotency_key,
        published_at=now,
        created_at=now,
        updated_at=now,
    )
    return job, rule, limit


def _limit_key(limit: Limit | None, payload: dict) -> str:
    return limit.key_of(payload) if limit is not None else ""


def enqueue(
    task: Task | str,
    payload: dict | None = None,
    *,
    queue: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    max_attempts: int | None = None,
    idempotency_key: str | None = None,
    unique: Unique | bool | None = None,
) -> Job:
    """Write a Job in the caller's transaction and publish its id once that commits.

    ``priority`` (−100…100, higher first) orders the job among the runnable jobs of its
    queue and task. A repeated ``idempotency_key`` returns the existing job instead of a new
    one. A unique job (the task's ``unique`` rule, or ``unique=``) whose key is held by a live
    job returns that job instead, with ``unique_conflict`` True (see jobs.unique).
    """
    now = timezone.now()
    job, declared, _ = _new_job(
        task,
        payload,
        queue=queue,
        priority=priority,
        run_after=run_after,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        now=now,
    )
    rule = _rule(declared, unique, job.task)
    job.unique_conflict = False
    if rule is not None:
        stamp(job, rule, now)
    if idempotency_key is not None:
        existing = Job.objects.filter(idempotency_key=idempotency_key).first()
        if existing is None:
            try:
                with transaction.atomic():
                    job = _save(job, rule)
            except IntegrityError as exc:
                if not violates(exc, Job, "job_idempotency_key_unique"):
                    raise
                # A concurrent caller inserted the same key first; theirs is the job.
                existing = Job.objects.get(idempotency_key=idempotency_key)
        if existing is not None:
            existing.unique_conflict = False  # an idempotent repeat, not a unique conflict
            return existing
    else:
        job = _save(job, rule)
    if job.unique_conflict:
        log_job("job.unique_conflict", job)
        return job
    log_job("job.enqueued", job)
    publish_on_commit([job])
    return job


def _save(job: Job, rule: Unique | None) -> Job:
    """Insert ``job``; a unique one whose key is live answers the job holding it."""
    if rule is None:
        job.save(force_insert=True)
        return job
    return insert([job])[0]


def enqueue_many(
    task: Task | str,
    payloads: list[dict],
    *,
    queue: str | None = None,
    priority: int = 0,
    run_after: datetime | None = None,
    max_attempts: int | None = None,
    batch_size: int = 1000,
    unique: Unique | bool | None = None,
) -> list[Job]:
    """Write one job per payload with one bulk INSERT per batch; publish them on commit.

    For a unique task a payload whose key is held by a live job is skipped: its place in
    the answer is that job (``unique_conflict`` True), so the answer stays in payload order.
    """
    now = timezone.now()
    template, declared, limit = _new_job(
        task,
        None,
        queue=queue,
        priority=priority,
        run_after=run_after,
        max_attempts=max_attempts,
        idempotency_key=None,
        now=now,
    )
    for payload in payloads:
        validate_payload(payload)
    jobs = [
        Job(
            task=template.task,
            queue=template.queue,
            payload=payload,
            limit_key=_limit_key(limit, payload),
            priority=priority,
            max_attempts=template.max_attempts,
            run_after=template.run_after,
            published_at=now,
            created_at=now,
            updated_at=now,
        )
        for payload in payloads
    ]
    rule = _rule(declared, unique, template.task)
    if rule is not None:
        return _enqueue_many_unique(jobs, rule, now, batch_size)
    jobs = Job.objects.bulk_create(jobs, batch_size=batch_size)
    if jobs and jobs[0].pk is None:  # backends without RETURNING on bulk insert
        raise RuntimeError("enqueue_many needs a database that returns primary keys")
    logger.info(
        "job.enqueued_many",
        extra={"task": template.task, "queue": template.queue, "count": len(jobs)},
    )
    publish_on_commit(jobs)
    return jobs


def _enqueue_many_unique(jobs: list[Job], rule: Unique, now, batch_size: int) -> list[Job]:
    """Insert unique jobs batch by batch, skipping live keys; publish only the new ones."""
    answers: list[Job] = []
    for job in jobs:
        stamp(job, rule, now)
    for start in range(0, len(jobs), batch_size):
        answers += insert(jobs[start : start + batch_size])
    created = list({job.pk: job for job in answers if not job.unique_conflict}.values())
    logger.info(
        "job.enqueued_many",
        extra={
            "task": jobs[0].task if jobs else None,
            "count": len(created),
            "unique_conflicts": len(answers) - len(created),
        },
    )
    publish_on_commit(created)
    return answers
