"""A ``django.tasks`` backend that runs Django's built-in tasks as Conveyor jobs.

``@task``-decorated functions enqueue a Job of task ``jobs.django_task`` whose payload names
the function and its arguments; the job engine gives them leases, retries and dead letters.
"""

from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils.json import normalize_json

from jobs import services
from jobs.models import Job, JobStatus

_STATUS = {
    JobStatus.QUEUED: TaskResultStatus.READY,
    JobStatus.RETRYING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


class ConveyorBackend(BaseTaskBackend):
    supports_defer = True
    supports_get_result = True
    supports_priority = False  # the broker delivers in order; Job.priority only orders the sweeper

    def enqueue(self, task, args, kwargs):
        self.validate_task(task)
        job = services.enqueue(
            "jobs.django_task",
            {
                "path": task.module_path,
                "args": normalize_json(args),
                "kwargs": normalize_json(kwargs),
                "takes_context": task.takes_context,
            },
            queue=task.queue_name if task.queue_name != "default" else None,
            priority=task.priority,
            run_after=task.run_after,
        )
        return self._result(task, job)

    def get_result(self, result_id):
        job = Job.objects.filter(pk=result_id, task="jobs.django_task").first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        from django.utils.module_loading import import_string

        task = import_string(job.payload["path"])
        return self._result(task, job)

    def _result(self, task, job: Job) -> TaskResult:
        result = TaskResult(
            task=task,
            id=str(job.pk),
            status=_STATUS[job.status],
            enqueued_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            last_attempted_at=job.started_at,
            args=job.payload.get("args", []),
            kwargs=job.payload.get("kwargs", {}),
            backend=self.alias,
            errors=[TaskError(exception_class_path="builtins.Exception", traceback=job.last_error)]
            if job.last_error
            else [],
            worker_ids=[job.locked_by] if job.locked_by else [],
        )
        object.__setattr__(result, "_return_value", job.result)
        return result
