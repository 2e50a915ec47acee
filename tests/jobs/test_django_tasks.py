"""Django's task framework on Conveyor, through its public API only, with a real worker."""

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.tasks import default_task_backend, task_backends
from django.tasks.base import TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.test import override_settings
from django.utils import timezone

from jobs.models import AuditLog
from project.celery import django_task_queues
from tests import djangotasks
from tests.processes import wait_until

RETRYING_TASKS = {
    "default": {
        "BACKEND": "jobs.backends.ConveyorBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"max_attempts": 4},
    }
}


def finished(result, timeout: float = 60):
    def check():
        result.refresh()
        return result.is_finished

    wait_until(check, timeout=timeout, message=f"task {result.id} to finish")
    return result


@pytest.fixture
def worker(start_worker):
    return start_worker(queues="default", concurrency=1)


def test_a_task_runs_and_its_result_reads_back(worker):
    result = djangotasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert result.attempts == 1 and result.errors == []
    assert result.worker_ids[0].startswith(f"{worker.name}@")
    assert result.enqueued_at <= result.started_at <= result.finished_at
    again = djangotasks.add.get_result(result.id)
    assert again.return_value == 5 and again.worker_ids == result.worker_ids
    assert finished(djangotasks.add_async.enqueue(4, 5)).return_value == 9


def test_get_result_returns_what_enqueue_returned(transactional_db):
    later = timezone.now() + timedelta(hours=1)
    task = djangotasks.add.using(run_after=later)
    result = task.enqueue(1, 2)
    fetched = default_task_backend.get_result(result.id)
    assert fetched == result
    assert (fetched.task.queue_name, fetched.task.run_after) == ("default", later)
    assert fetched.task.backend == "default" and fetched.task.priority == 0
    assert djangotasks.add.get_result(result.id).task == task


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("os.path.join", "is not a django.tasks Task but a function"),
        ("no_such_module.thing", "does not import"),
    ],
)
def test_a_job_whose_path_names_no_task_answers_failed_and_dies_when_run(start_worker, path, says):
    from jobs.models import Job, JobStatus

    with transaction.atomic():  # a stale or tampered row: published only once it is changed
        result = djangotasks.add.enqueue(2, 3)
        job = Job.objects.get(pk=int(result.id))
        Job.objects.filter(pk=job.pk).update(payload={**job.payload, "path": path})
    fetched = default_task_backend.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED and fetched.id == result.id
    assert fetched.errors[0].exception_class_path == "jobs.backends.NotATask"
    assert path in fetched.errors[0].traceback and says in fetched.errors[0].traceback
    start_worker(queues="default", concurrency=1)
    wait_until(
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.DEAD,
        timeout=60,
        message="the job naming no task to end dead",
    )
    dead = Job.objects.get(pk=job.pk)
    assert dead.attempts == 1 and says in dead.last_error
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.FAILED


@pytest.mark.parametrize("bad", [str(uuid.uuid4()), "", "abc", "-1", "0", "9" * 30])
def test_get_result_of_an_unknown_id_raises_does_not_exist(transactional_db, bad):
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(bad)


def test_a_task_that_raises_fails_once_with_the_real_exception(worker):
    result = finished(djangotasks.fails.enqueue("no such account"))
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "raise ValueError(message)" in error.traceback
    assert error.traceback.rstrip().endswith("ValueError: no such account")


@pytest.mark.parametrize("task", [djangotasks.exits, djangotasks.interrupts])
def test_system_exit_and_keyboard_interrupt_fail_the_task_not_the_worker(worker, task):
    children = worker.children()
    result = finished(task.enqueue())
    assert result.status == TaskResultStatus.FAILED and result.attempts == 1
    expected = "builtins.SystemExit" if task is djangotasks.exits else "builtins.KeyboardInterrupt"
    assert [e.exception_class_path for e in result.errors] == [expected]
    assert worker.children() == children  # the pool child lives on
    assert "WorkerLostError" not in worker.text()
    assert finished(djangotasks.add.enqueue(1, 1)).worker_ids[0] == result.worker_ids[0]


@override_settings(TASKS=RETRYING_TASKS)
def test_retries_are_opt_in_and_every_attempt_is_kept(worker):
    result = djangotasks.flaky.enqueue(3)
    finished(result, timeout=120)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 4, "id": result.id}
    assert result.attempts == 4 and len(result.worker_ids) == 4
    assert [e.exception_class_path for e in result.errors] == ["builtins.ConnectionError"] * 3
    assert [e.traceback.splitlines()[-1] for e in result.errors] == [
        f"ConnectionError: attempt {n} fails" for n in (1, 2, 3)
    ]


def test_signals_and_django_log_lines(worker):
    sent = []

    def on_enqueued(sender, task_result, **kwargs):
        sent.append(task_result.id)

    task_enqueued.connect(on_enqueued)
    try:
        with transaction.atomic():
            result = djangotasks.add.enqueue(20, 22)
            assert sent == []  # not before the enqueue is committed
        assert sent == [result.id]
    finally:
        task_enqueued.disconnect(on_enqueued)
    finished(result)
    path = "tests.djangotasks.add"

    def logged():
        text = worker.text()
        return all(
            f"Task id={result.id} path={path} state={state}" in text
            for state in ("RUNNING", "SUCCESSFUL")
        )

    wait_until(logged, timeout=10, message="django.tasks log lines from the worker")


def test_queues_declared_in_tasks_are_consumed_without_flags(start_worker):
    with override_settings(TASKS=task_backends_with_emails()):
        assert django_task_queues() == ("emails",)
        result = djangotasks.send_email.using(queue_name="emails").enqueue("ops@example.com")
    # The worker as make run starts it: every queue but deployments and webhooks.
    start_worker(
        queues=None,
        env={"DJANGO_SETTINGS_MODULE": "tests.tasks_settings"},
        extra_args=("--exclude-queues", "deployments,webhooks"),
    )
    with override_settings(TASKS=task_backends_with_emails()):
        finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert AuditLog.objects.filter(action="test.email", target_id="ops@example.com").exists()


def task_backends_with_emails() -> dict:
    from tests.tasks_settings import TASKS

    return TASKS


def test_the_backend_says_what_it_supports():
    backend = task_backends["default"]
    assert (backend.supports_defer, backend.supports_get_result) == (True, True)
    assert backend.supports_async_task and backend.supports_priority


def test_a_task_waiting_for_its_next_attempt_is_ready(transactional_db):
    """As Django reports a task that will run again."""
    from jobs.models import Job, JobStatus

    result = djangotasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    Job.objects.filter(pk=result.id).update(status=JobStatus.RETRYING)
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
    Job.objects.filter(pk=result.id).update(status=JobStatus.DEAD)
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.FAILED
