"""Bulk retry, cancel and delete of everything matching a Jobs list filter (jobs.bulk)."""

import os
import signal
import threading
from collections import Counter

import pytest
from django.contrib.auth.models import Permission
from django.db import connection, transaction
from django.db.models.deletion import Collector
from django.test import Client
from django.urls import reverse

from jobs import bulk, services
from jobs.changelist import ApproximateCount
from jobs.errors import JobNotFound
from jobs.models import AuditLog, BulkAction, BulkOperation, BulkStatus, Job, JobStatus
from tests.jobs.test_faults import child_pid
from tests.processes import wait_until

S = JobStatus
LIST = "/admin/jobs/job/"


def _dead(task: str, n: int, **payload) -> list[int]:
    """``n`` dead jobs of ``task``, written dead in the transaction that creates them."""
    with transaction.atomic():
        jobs = services.enqueue_many(task, [{"n": i, **payload} for i in range(n)])
        ids = [job.pk for job in jobs]
        Job.objects.filter(pk__in=ids).update(
            status=S.DEAD, reason="exhausted", last_error="ValueError: boom"
        )
    return ids


def _staff(django_user_model, name: str, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(name, password=f"{name}-pw-1", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", *codenames]))
    client = Client()
    client.force_login(user)
    client.user = user
    return client


def _retries(ids: list[int]) -> Counter:
    """How many ``job.retry`` audit entries each job has (one per retry of it)."""
    found = AuditLog.objects.filter(action="job.retry", target_id__in=[str(i) for i in ids])
    return Counter(int(i) for i in found.values_list("target_id", flat=True))


def _wait_done(operation: BulkOperation, timeout: float = 90) -> BulkOperation:
    def done():
        operation.refresh_from_db()
        return operation.status == BulkStatus.DONE

    wait_until(done, timeout=timeout, message=f"bulk operation {operation.pk} to finish")
    return operation


def test_bulk_retry_of_a_filter_wider_than_a_page_retries_each_job_once(
    start_worker, purge_broker, django_user_model
):
    matching = _dead("tests.record", 130)
    other_task = _dead("tests.permanent", 5)
    purge_broker()  # the dead jobs' doorbells: nothing to claim
    operator = _staff(django_user_model, "operator", "retry_job")
    filters = {"status__exact": "dead", "task": "tests.record"}

    listed = operator.get(LIST, filters)
    assert listed.context["cl"].result_count == 130 and len(listed.context["cl"].result_list) < 130
    assert "bulk/retry/?" in listed.content.decode()
    confirm = operator.get(reverse("admin:jobs_job_bulk", args=["retry"]), filters)
    assert confirm.status_code == 200 and confirm.context["count"] == 130
    assert Job.objects.filter(task=bulk.BULK_TASK).count() == 0  # nothing before the POST

    response = operator.post(reverse("admin:jobs_job_bulk", args=["retry"]), filters)
    operation = BulkOperation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:jobs_job_bulk_progress", args=[operation.pk])
    assert (operation.total, operation.max_id, operation.actor) == (130, max(matching), "operator")

    start_worker(concurrency=2)
    _wait_done(operation)
    assert (operation.done, operation.failed, operation.last_id) == (130, 0, max(matching))
    assert _retries(matching) == Counter({job_id: 1 for job_id in matching})
    assert _retries(other_task) == Counter()
    assert set(Job.objects.filter(pk__in=other_task).values_list("status", flat=True)) == {S.DEAD}

    def all_ran():
        return Job.objects.filter(pk__in=matching, status=S.SUCCEEDED).count() == 130

    wait_until(all_ran, timeout=90, message="the retried jobs to run")
    audit = AuditLog.objects.get(action="job.bulk_retry")
    assert audit.actor == "operator" and audit.target_id == str(operation.pk)
    assert audit.details["matching"] == 130
    assert audit.details["filter"] == "status__exact=dead, task=tests.record"
    page = operator.get(reverse("admin:jobs_job_bulk_progress", args=[operation.pk]))
    assert page.status_code == 200
    assert '<td id="bulk-done">130</td>' in page.content.decode()
    assert 'data-live-state="finished"' in page.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("holds", "action"),
    [((), "retry"), (("cancel_job",), "retry"), (("retry_job",), "cancel"), ((), "delete")],
)
def test_a_bulk_action_without_its_permission_is_refused(django_user_model, holds, action):
    _dead("jobs.noop", 3)
    client = _staff(django_user_model, "viewer", *holds)
    url = reverse("admin:jobs_job_bulk", args=[action])
    assert client.get(url, {"status__exact": "dead"}).status_code == 403
    assert client.post(url, {"status__exact": "dead"}).status_code == 403
    assert not BulkOperation.objects.exists()
    assert not Job.objects.filter(task=bulk.BULK_TASK).exists()
    assert not AuditLog.objects.filter(action__startswith="job.bulk_").exists()
    assert f"bulk/{action}/" not in client.get(LIST).content.decode()


@pytest.mark.django_db
def test_a_payload_filter_carries_into_the_bulk_job_and_is_hidden_in_the_audit(
    django_user_model,
):
    eu = _dead("jobs.noop", 4, region="eu")
    _dead("jobs.noop", 3, region="us")
    client = _staff(django_user_model, "operator", "retry_job")
    client.post(reverse("admin:jobs_job_bulk", args=["retry"]), {"payload": "region=eu"})
    operation = BulkOperation.objects.get()
    assert operation.total == 4
    bulk.bulk_run(operation.pk, pause=0)
    operation.refresh_from_db()
    assert (operation.status, operation.done) == (BulkStatus.DONE, 4)
    assert set(Job.objects.filter(pk__in=eu).values_list("status", flat=True)) == {S.QUEUED}
    assert Job.objects.filter(status=S.DEAD).count() == 3
    audit = AuditLog.objects.get(action="job.bulk_retry")
    assert audit.details["filter"] == "payload=region=***"


@pytest.mark.django_db
def test_a_resumed_run_starts_after_its_last_processed_id(django_user_model):
    ids = _dead("jobs.noop", 25)
    client = _staff(django_user_model, "operator", "retry_job")
    operation = bulk.bulk_create(action=BulkAction.RETRY, filters={}, user=client.user)
    # As if a first run had done the first ten and then lost its worker.
    BulkOperation.objects.filter(pk=operation.pk).update(
        last_id=ids[9], done=10, status=BulkStatus.RUNNING
    )
    bulk.bulk_run(operation.pk, batch_size=4, pause=0)
    operation.refresh_from_db()
    assert (operation.done, operation.failed, operation.status) == (25, 0, BulkStatus.DONE)
    assert _retries(ids) == Counter({job_id: 1 for job_id in ids[10:]})
    bulk.bulk_run(operation.pk)  # done: a further run does nothing
    assert _retries(ids) == Counter({job_id: 1 for job_id in ids[10:]})


@pytest.mark.django_db
def test_bulk_delete_removes_only_finished_jobs_and_never_newer_ones(django_user_model):
    dead = _dead("jobs.noop", 5)
    waiting = services.enqueue("jobs.noop", {})
    client = _staff(django_user_model, "operator", "delete_job")
    operation = bulk.bulk_create(action=BulkAction.DELETE, filters={}, user=client.user)
    assert operation.total == 5
    later = _dead("jobs.noop", 2)  # after the confirmation: not part of it
    bulk.bulk_run(operation.pk, batch_size=2, pause=0)
    operation.refresh_from_db()
    assert (operation.done, operation.failed) == (5, 0)
    assert not Job.objects.filter(pk__in=dead).exists()
    assert set(Job.objects.filter(task="jobs.noop").values_list("pk", flat=True)) == {
        waiting.pk,
        *later,
    }


@pytest.mark.django_db(transaction=True)
def test_a_retry_while_a_bulk_delete_holds_its_job_waits_and_finds_it_gone(
    django_user_model, monkeypatch
):
    """Django's delete reads the rows, then deletes them by id. An operator's retry that
    comes in between (another session) waits for the batch and finds its job gone: it never
    queues a job the batch then deletes (before the lock, the retry said it had queued it,
    and the job was gone)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite writes one transaction at a time)")
    dead = _dead("jobs.noop", 3)
    client = _staff(django_user_model, "operator", "delete_job")
    operation = bulk.bulk_create(action=BulkAction.DELETE, filters={}, user=client.user)
    retry: dict = {}

    def operator_retries():
        try:
            services.job_retry(dead[1], actor="operator")
            retry["outcome"] = "queued"
        except JobNotFound:
            retry["outcome"] = "not found"
        finally:
            connection.close()

    def waiting_for_a_lock() -> bool:
        with connection.cursor() as cursor:  # inside the batch: its snapshot is dropped
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock')"
            )
            return cursor.fetchone()[0]

    delete = Collector.delete

    def retried_meanwhile(collector):
        retry["thread"] = threading.Thread(target=operator_retries)
        retry["thread"].start()
        wait_until(
            lambda: not retry["thread"].is_alive() or waiting_for_a_lock(),
            timeout=10,
            message="the retry to wait for the row or to end",
        )
        return delete(collector)

    monkeypatch.setattr(Collector, "delete", retried_meanwhile)
    bulk.bulk_run(operation.pk, batch_size=10, pause=0)
    retry["thread"].join(timeout=30)
    assert retry["outcome"] == "not found"
    assert not Job.objects.filter(pk__in=dead).exists()
    operation.refresh_from_db()
    assert (operation.done, operation.failed) == (3, 0)


@pytest.mark.django_db(transaction=True)
def test_a_job_retried_before_its_batch_is_kept_and_said_so(django_user_model, monkeypatch):
    dead = _dead("jobs.noop", 3)
    client = _staff(django_user_model, "operator", "delete_job")
    operation = bulk.bulk_create(action=BulkAction.DELETE, filters={}, user=client.user)
    act = bulk._act

    def retried_first(operation, ids, user):  # after the batch read its ids, before its act
        services.job_retry(dead[1], actor="operator")
        return act(operation, ids, user)

    monkeypatch.setattr(bulk, "_act", retried_first)
    bulk.bulk_run(operation.pk, batch_size=10, pause=0)
    operation.refresh_from_db()
    assert (operation.done, operation.failed) == (2, 1)
    assert operation.errors == [f"job {dead[1]} is kept: it is queued now (retried meanwhile)"]
    assert list(Job.objects.filter(pk__in=dead).values_list("pk", "status")) == [
        (dead[1], S.QUEUED)
    ]


@pytest.mark.django_db
def test_bulk_cancel_counts_what_an_owner_or_the_state_machine_refuses(django_user_model):
    queued = [services.enqueue("jobs.noop", {}).pk for _ in range(3)]
    client = _staff(django_user_model, "operator", "cancel_job")
    operation = bulk.bulk_create(action=BulkAction.CANCEL, filters={}, user=client.user)
    assert operation.total == 3
    Job.objects.filter(pk=queued[0]).update(status=S.SUCCEEDED)  # finished meanwhile
    bulk.bulk_run(operation.pk, pause=0)
    operation.refresh_from_db()
    # The finished one no longer matches: it is neither cancelled nor counted as refused.
    assert (operation.done, operation.failed) == (2, 0)
    assert set(Job.objects.filter(pk__in=queued[1:]).values_list("status", flat=True)) == {
        S.CANCELLED
    }


def test_killing_the_bulk_jobs_worker_resumes_without_retrying_twice(
    start_worker, purge_broker, django_user_model
):
    ids = _dead("jobs.noop", 1500)
    purge_broker()
    client = _staff(django_user_model, "operator", "retry_job")
    operation = bulk.bulk_create(
        action=BulkAction.RETRY, filters={"task": "jobs.noop"}, user=client.user
    )
    start_worker(concurrency=1, queues="default")
    job = Job.objects.get(pk=operation.job_id)

    def mid_way():
        operation.refresh_from_db()
        job.refresh_from_db()
        return job.status == S.RUNNING and 0 < operation.last_id < max(ids) - 500

    wait_until(mid_way, timeout=60, interval=0.05, message="the bulk job to be mid-way")
    os.kill(child_pid(job), signal.SIGKILL)
    _wait_done(operation, timeout=120)
    job.refresh_from_db()
    assert job.attempts >= 2 and "WorkerLostError" in job.attempts_history[0]["error"]["message"]
    assert (operation.done, operation.failed) == (1500, 0)
    assert _retries(ids) == Counter({job_id: 1 for job_id in ids})


@pytest.mark.django_db
def test_a_run_acts_on_nothing_once_its_user_lost_the_permission_or_its_filter_is_refused(
    django_user_model,
):
    ids = _dead("jobs.noop", 3)
    client = _staff(django_user_model, "operator", "retry_job")
    lost = bulk.bulk_create(action=BulkAction.RETRY, filters={}, user=client.user)
    refused = bulk.bulk_create(action=BulkAction.RETRY, filters={}, user=client.user)
    BulkOperation.objects.filter(pk=refused.pk).update(filters={"owned_by": ["planet:3"]})
    bulk.bulk_run(refused.pk, pause=0)
    client.user.user_permissions.remove(Permission.objects.get(codename="retry_job"))
    bulk.bulk_run(lost.pk, pause=0)
    for operation, reason in ((lost, "may no longer"), (refused, "the filter is refused")):
        operation.refresh_from_db()
        assert (operation.status, operation.done, operation.failed) == (BulkStatus.DONE, 0, 0)
        assert reason in operation.errors[0]
    assert _retries(ids) == Counter()


@pytest.mark.django_db
def test_beyond_the_exact_cap_the_confirmation_shows_an_estimate(django_user_model, monkeypatch):
    monkeypatch.setattr("jobs.changelist.EXACT_COUNT_CAP", 5)
    _dead("jobs.noop", 8)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    client = _staff(django_user_model, "operator", "retry_job")
    url = reverse("admin:jobs_job_bulk", args=["retry"])
    confirm = client.get(url, {"status__exact": "dead"})
    assert isinstance(confirm.context["count"], ApproximateCount)
    assert "about " in confirm.content.decode()
    client.post(url, {"status__exact": "dead"})
    operation = BulkOperation.objects.get()
    assert operation.total_is_estimate and operation.total >= 6
    progress = client.get(reverse("admin:jobs_job_bulk_progress", args=[operation.pk]))
    assert f'<td id="bulk-total">about {operation.total}</td>' in progress.content.decode()
