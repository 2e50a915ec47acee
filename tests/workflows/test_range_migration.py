"""Unapplying migration 0030 turns each range edge back into one edge per member, so the
code before it still finds every dependency a callback waits for."""

import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from jobs import workflows
from jobs.models import Job

BEFORE = [("jobs", "0029_kept_workflow_index")]
pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="range edges are PostgreSQL's (rows.edges)"
)


def test_unapplied_a_range_becomes_one_edge_per_member(transactional_db):
    with transaction.atomic():
        flow = workflows.chord(["tests.wf.add"] * 3, "tests.wf.collect").enqueue()
    *members, callback = Job.objects.filter(workflow=flow).order_by("id")
    Job.objects.filter(pk=members[1].pk).update(status="succeeded")
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(BEFORE)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT dependant_id, dependency_id, done FROM jobs_jobdependency "
                "ORDER BY dependency_id"
            )
            edges = cursor.fetchall()
        assert edges == [
            (callback.pk, members[0].pk, False),
            (callback.pk, members[1].pk, True),  # it has ended
            (callback.pk, members[2].pk, False),
        ]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
