"""A ``django.tasks`` backend that runs Django's built-in tasks as Conveyor jobs.

A ``@task`` function's ``enqueue()`` writes a Job of task ``jobs.django_task`` in the caller's
transaction; its payload names the function, its arguments and the task's options, so
``get_result()`` rebuilds exactly the task that was enqueued. The job engine gives it a lease,
a per-attempt history and a dead letter; its ``TaskResult`` is read from the Job row:

=================  ====================================================================
``status``         queued or retrying → READY (will run), running → RUNNING, succeeded →
                   SUCCESSFUL, dead or cancelled → FAILED
``errors``         one ``TaskError`` per failed attempt, oldest first: the real exception
                   class path and its formatted traceback (the last 8,000 characters)
``worker_ids``     the worker of every attempt (so ``attempts`` counts them)
=================  ====================================================================

Options (``TASKS[alias]["OPTIONS"]``): ``max_attempts`` (default 1: as Django documents, a
task that raises has failed; more opts into Conveyor's retries with backoff). Signals:
``task_enqueued`` once the enqueue commits, ``task_started`` in the worker when an attempt
starts, ``task_finished`` once the attempt's end is recorded (SUCCESSFUL, FAILED, or READY
when it will be retried).
"""

import dataclasses

from django.db import transaction
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.dateparse import parse_datetime
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from jobs import services
from jobs.attempts import history
from jobs.errors import Permanent
from jobs.models import Job, JobStatus
from jobs.task_names import DJANGO_TASK

TASK_NAME = DJANGO_TASK  # the Celery task that runs them (jobs.task_names)


class NotATask(Permanent):
    """The path a job names is no django.tasks Task (a stale or tampered row): it fails for
    good when run, and its result says so."""


def not_a_task():
    """The stand-in function of a result whose job names no task (see ``NotATask``)."""
    raise NotATask("this job's path names no django.tasks Task")


MAX_ID = 2**63 - 1
STATUS = {
    JobStatus.WAITING: TaskResultStatus.READY,  # a workflow's job waiting for its dependencies
    JobStatus.QUEUED: TaskResultStatus.READY,
    JobStatus.RETRYING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


class ConveyorBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True  # coroutine functions run to completion in the worker
    supports_get_result = True
    # A claim takes the runnable job of highest priority first (Django's range, −100…100).
    supports_priority = True

    def __init__(self, alias, params):
        super().__init__(alias, params)
        self.max_attempts = int(self.options.get("max_attempts", 1))

    def enqueue(self, task, args, kwargs):
        self.validate_task(task)
        job = services.enqueue(
            TASK_NAME,
            {
                "path": task.module_path,
                "args": normalize_json(args),
                "kwargs": normalize_json(kwargs),
                "takes_context": task.takes_context,
                "queue_name": task.queue_name,
                "priority": task.priority,
                "run_after": task.run_after.isoformat() if task.run_after else None,
                "backend": self.alias,
            },
            queue=task.queue_name,
            priority=task.priority,
            run_after=task.run_after,
            max_attempts=self.max_attempts,
        )
        result = self.result(job, task=task)
        transaction.on_commit(
            lambda: task_enqueued.send(type(self), task_result=result), robust=True
        )
        return result

    def get_result(self, result_id):
        try:
            job_id = int(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        job = None
        if 0 < job_id <= MAX_ID:
            job = Job.objects.filter(pk=job_id, task=TASK_NAME).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return self.result(job)

    def task_of(self, job: Job):
        """Rebuild the task exactly as it was enqueued (queue, priority, run_after).

        Raise ``NotATask`` if the job's path does not import, or names something else.
        """
        payload = job.payload
        path = payload.get("path") if isinstance(payload, dict) else None
        try:
            task = import_string(str(path))
        except ImportError as exc:
            raise NotATask(f"{path!r} does not import: {exc}") from None
        if not isinstance(task, Task):
            raise NotATask(f"{path!r} is not a django.tasks Task but a {type(task).__name__}")
        run_after = payload.get("run_after")
        return dataclasses.replace(
            task,
            backend=self.alias,
            queue_name=payload.get("queue_name", task.queue_name),
            priority=payload.get("priority", task.priority),
            run_after=parse_datetime(run_after) if run_after else None,
        )

    def _stand_in(self, job: Job) -> Task:
        """The task a result shows for a job whose path names none (``not_a_task``)."""
        queue = job.queue if not self.queues or job.queue in self.queues else min(self.queues)
        return Task(
            priority=0, func=not_a_task, backend=self.alias, queue_name=queue, run_after=None
        )

    def result(self, job: Job, *, task=None, status=None) -> TaskResult:
        """The ``TaskResult`` of ``job`` as its row (and its attempt history) tell it.

        A job whose path names no task answers FAILED, its first error saying why.
        """
        problem = None
        if task is None:
            try:
                task = self.task_of(job)
            except NotATask as exc:
                problem = TaskError(exception_class_path=f"{__name__}.NotATask", traceback=str(exc))
                task, status = self._stand_in(job), TaskResultStatus.FAILED
        attempts = history(job)
        workers = [entry["worker"] for entry in attempts]
        if job.status == JobStatus.RUNNING and job.locked_by:
            workers.append(job.locked_by)  # the attempt under way
        errors = [
            TaskError(
                exception_class_path=entry["error"]["class_path"] or "builtins.Exception",
                traceback=entry["error"]["traceback"] or entry["error"]["message"],
            )
            for entry in attempts
            if entry["error"] and entry["outcome"] != JobStatus.SUCCEEDED
        ]
        if problem is not None:
            errors.insert(0, problem)
        last_start = attempts[-1]["started_at"] if attempts else None
        if job.status == JobStatus.RUNNING:
            last_start = job.started_at
        result = TaskResult(
            task=task,
            id=str(job.pk),
            status=status or STATUS[job.status],
            enqueued_at=job.created_at,
            started_at=attempts[0]["started_at"] if attempts else job.started_at,
            finished_at=job.finished_at,
            last_attempted_at=last_start,
            args=job.payload.get("args", []),
            kwargs=job.payload.get("kwargs", {}),
            backend=self.alias,
            errors=errors,
            worker_ids=workers,
        )
        object.__setattr__(result, "_return_value", job.result)
        return result
