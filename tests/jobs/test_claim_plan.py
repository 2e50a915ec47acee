"""The claim's cached generic plan reaches its row by the primary key, whatever the table's
statistics say: a worker's connection prepares the claim once and keeps that plan until the
next ``ANALYZE``, so a plan made while the table had no statistics (a new installation, a
truncated table) must not scan the whole table for the one row it updates.
"""

import pytest
from django.db import connection
from django.utils import timezone

from jobs import services, statements
from jobs.models import Job

TASK = "tests.record"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def never_analyzed():
    """3,000 queued jobs in a table the server holds no statistics for."""
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    services.enqueue(TASK, {})  # the queue's and the task's rows, as enqueue makes them
    with connection.cursor() as cursor:
        columns = [f.column for f in Job._meta.concrete_fields if not f.primary_key]
        cursor.execute(
            f"INSERT INTO jobs_job ({', '.join(columns)}) SELECT {', '.join(columns)} "
            "FROM jobs_job, generate_series(1, 3000)"
        )
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = 'jobs_job'::regclass")
        cursor.execute(
            "UPDATE pg_class SET reltuples = -1 WHERE oid IN ("
            "SELECT 'jobs_job'::regclass UNION SELECT indexrelid FROM pg_index "
            "WHERE indrelid = 'jobs_job'::regclass)"
        )
    connection.close()  # a new connection: nothing prepared, no plan cached
    yield
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    connection.close()


def prepared_claim_plan(job_id: int) -> str:
    """Claim as a worker does (preparing the claim), then the plan the server cached for it."""
    assert statements.claim(job_id, task=TASK, worker="node/1") is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'conveyor_%%'")
        (name,) = [row[0] for row in cursor.fetchall()]  # this new connection's only one
        params = statements._claim_params(job_id, TASK, "node/2", timezone.now())
        marks = ", ".join(["%s"] * len(params))
        cursor.execute(f"EXPLAIN (COSTS OFF) EXECUTE {name}({marks})", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.usefixtures("never_analyzed")
def test_a_claim_planned_without_statistics_updates_its_row_by_the_primary_key():
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(id) FROM jobs_job")
        job_id = cursor.fetchone()[0]
    plan = prepared_claim_plan(job_id)
    assert "Seq Scan on jobs_job" not in plan, plan
    assert "Index Scan using jobs_job_pkey on jobs_job\n" in plan + "\n", plan
    assert "job_runnable_idx" in plan, plan  # the pick: the best runnable job, in order
