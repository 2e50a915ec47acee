"""The sweeper's candidates query is planned as the small read it is, without leaking settings."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.maintenance import sweeper

pytestmark = pytest.mark.django_db(transaction=True)  # autocommit, as the runner calls it


def show(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return cursor.fetchone()[0]


def test_the_candidates_query_runs_without_jit_and_the_settings_end_with_it():
    before = (show("jit"), show("max_parallel_workers_per_gather"))
    with CaptureQueriesContext(connection) as queries:
        sweeper._candidates(timezone.now())
    sql = [q["sql"] for q in queries.captured_queries]
    assert "SET LOCAL jit = off" in sql and "SET LOCAL max_parallel_workers_per_gather = 0" in sql
    assert (show("jit"), show("max_parallel_workers_per_gather")) == before


def test_inside_a_callers_transaction_nothing_is_set():
    before = (show("jit"), show("max_parallel_workers_per_gather"))
    with transaction.atomic():
        sweeper._candidates(timezone.now())
        assert (show("jit"), show("max_parallel_workers_per_gather")) == before
