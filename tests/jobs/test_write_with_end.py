"""A body's ``ctx.write_with_end``: written in its run's end's message, whatever the end."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import services
from jobs.models import AuditLog, Job, JobStatus
from tests.jobtasks import write_with_end_task

S = JobStatus


def _rows(job: Job) -> int:
    return AuditLog.objects.filter(action="test.with_end", target_id=str(job.pk)).count()


@pytest.mark.django_db(transaction=True)  # autocommit, as in a worker
def test_a_success_writes_the_row_in_the_ends_message():
    job = services.enqueue("tests.write_with_end", {})
    with CaptureQueriesContext(connection) as queries:
        write_with_end_task(job.pk)
    (end,) = [q["sql"] for q in queries.captured_queries if "jobs_auditlog" in q["sql"]]
    row, then = end.split("; ", 1)  # one message: the row, then the end (prepared or not)
    assert row.startswith('INSERT INTO "jobs_auditlog"')
    assert then.startswith(("EXECUTE conveyor_", "UPDATE jobs_job"))
    assert Job.objects.get(pk=job.pk).status == S.SUCCEEDED and _rows(job) == 1


@pytest.mark.django_db(transaction=True)
def test_a_failure_writes_the_row_with_its_end_too():
    job = services.enqueue("tests.write_with_end", {"fail": True})
    write_with_end_task(job.pk)
    job.refresh_from_db()
    assert job.status == S.DEAD and "failed after asking" in job.last_error
    assert _rows(job) == 1


@pytest.mark.django_db(transaction=True)
def test_a_write_that_fails_fails_the_run_and_leaves_nothing_of_itself():
    job = services.enqueue("tests.write_with_end", {"bad": True}, max_attempts=1)
    write_with_end_task(job.pk)
    job.refresh_from_db()
    assert job.status == S.DEAD and "actor" in job.last_error  # the constraint's error
    assert _rows(job) == 0
    assert connection.connection.info.transaction_status == 0  # idle: usable as it was


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_of_the_callers_the_row_is_written_at_once():
    from django.db import transaction

    from jobs.task import JobContext

    job = services.enqueue("tests.write_with_end", {})
    with transaction.atomic():
        ctx = JobContext(job=job)  # no end of its own to ride on: end_writes is None
        ctx.write_with_end("UPDATE jobs_job SET priority = 7 WHERE id = %s", [job.pk])
        assert Job.objects.get(pk=job.pk).priority == 7
