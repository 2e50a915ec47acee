"""Jobs executed by real Celery workers on PostgreSQL + Redis."""

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from jobs import services
from jobs.errors import IllegalTransition
from jobs.models import AuditLog, Job, JobStatus, Notification
from tests.processes import wait_until

S = JobStatus


def executions(job: Job) -> int:
    return AuditLog.objects.filter(action="test.executed", target_id=str(job.pk)).count()


def wait_for_status(job: Job, *statuses: str, timeout: float = 60) -> Job:
    def check():
        job.refresh_from_db()
        return job.status in statuses

    wait_until(check, timeout=timeout, message=f"job {job.pk} to reach {statuses}")
    return job


def test_a_job_runs_once_and_succeeds(start_worker):
    start_worker(concurrency=1)
    job = services.enqueue("tests.record", {"n": 7})
    wait_for_status(job, S.SUCCEEDED)
    assert job.attempts == 1
    assert job.result == {"n": 7}
    assert job.finished_at >= job.started_at >= job.created_at
    assert executions(job) == 1


def test_enqueue_publishes_only_after_commit(start_worker):
    start_worker(concurrency=1)
    with transaction.atomic():
        job = services.enqueue("tests.record", {})
        rolled_back = None
        try:
            with transaction.atomic():
                rolled_back = services.enqueue("tests.record", {})
                raise RuntimeError("abort the inner block")
        except RuntimeError:
            pass
    wait_for_status(job, S.SUCCEEDED)
    assert not Job.objects.filter(pk=rolled_back.pk).exists()


def test_the_same_job_published_five_times_runs_once(start_worker, purge_broker):
    from jobs.publish import publish

    job = services.enqueue("tests.record", {"sleep": 0.2})
    for _ in range(4):
        publish([job])
    worker = start_worker(concurrency=2)
    wait_for_status(job, S.SUCCEEDED)
    wait_until(
        lambda: len(worker.events("job.duplicate_dropped")) == 4,
        timeout=30,
        message="four duplicates to be dropped",
    )
    assert executions(job) == 1
    assert {e["job_id"] for e in worker.events("job.duplicate_dropped")} == {job.pk}


def test_transient_failures_retry_with_backoff_then_succeed(start_worker):
    worker = start_worker(concurrency=1)
    job = services.enqueue("tests.flaky", {"fail_runs": 2})
    wait_for_status(job, S.SUCCEEDED)
    assert job.attempts == 3
    assert executions(job) == 3
    retries = [e for e in worker.events("job.fail_retry") if e["job_id"] == job.pk]
    assert [e["attempt"] for e in retries] == [1, 2]
    assert "ConnectionError" in retries[0]["error"]


def test_permanent_error_is_dead_after_one_attempt(start_worker):
    start_worker(concurrency=1)
    job = services.enqueue("tests.permanent", {})
    wait_for_status(job, S.DEAD)
    assert job.attempts == 1
    assert "Permanent" in job.last_error
    assert AuditLog.objects.filter(action="job.dead", target_id=str(job.pk)).count() == 1


def test_exhausted_attempts_bury_the_job_with_a_dead_letter(start_worker):
    users = get_user_model().objects
    staff = [users.create_user(f"staff{i}", is_staff=True) for i in range(2)]
    users.create_user("inactive", is_staff=True, is_active=False)
    users.create_user("customer")
    start_worker(concurrency=1)
    job = services.enqueue("tests.flaky", {"fail_runs": 99}, max_attempts=2)
    wait_for_status(job, S.DEAD)
    assert job.attempts == 2
    assert "transient failure on attempt 2" in job.last_error
    audit = AuditLog.objects.get(action="job.dead", target_id=str(job.pk))
    assert audit.details["attempts"] == 2
    notices = Notification.objects.filter(topic="job.dead", data__job_id=job.pk)
    assert sorted(n.recipient_id for n in notices) == sorted(u.pk for u in staff)


def test_snooze_waits_without_spending_an_attempt(start_worker):
    start_worker(concurrency=1)
    job = services.enqueue("tests.snooze", {"seconds": 1})
    wait_for_status(job, S.SUCCEEDED)
    assert job.result == "woke"
    assert job.attempts == 1
    assert executions(job) == 2


def test_cancel_a_running_job_through_its_heartbeat(start_worker):
    start_worker(concurrency=1)
    job = services.enqueue("tests.wait_for_cancel", {"timeout": 60})
    wait_for_status(job, S.RUNNING)
    services.job_cancel(job.pk, actor="tester")
    wait_for_status(job, S.CANCELLED)
    assert AuditLog.objects.filter(
        action="job.cancel", actor="tester", target_id=str(job.pk)
    ).exists()


@pytest.mark.django_db(transaction=True)
def test_cancel_a_waiting_job_is_immediate_and_it_never_runs(start_worker, purge_broker):
    job = services.enqueue("tests.record", {})
    services.job_cancel(job.pk, actor="tester")
    job.refresh_from_db()
    assert job.status == S.CANCELLED and job.finished_at is not None
    worker = start_worker(concurrency=1)
    wait_until(
        lambda: worker.events("job.duplicate_dropped"),
        timeout=30,
        message="the message to be dropped",
    )
    assert executions(job) == 0


def test_operator_retry_requeues_a_dead_job_with_a_fresh_budget(start_worker):
    start_worker(concurrency=1)
    job = services.enqueue("tests.flaky", {"fail_runs": 2}, max_attempts=2)
    wait_for_status(job, S.DEAD)
    assert job.attempts == 2
    with pytest.raises(IllegalTransition):
        services.job_cancel(job.pk, actor="operator")
    services.job_retry(job.pk, actor="operator")
    wait_for_status(job, S.SUCCEEDED, S.DEAD)
    assert job.status == S.SUCCEEDED and job.attempts == 1  # a fresh budget, counted anew
    assert AuditLog.objects.filter(
        action="job.retry", actor="operator", target_id=str(job.pk)
    ).exists()
    assert executions(job) == 3
