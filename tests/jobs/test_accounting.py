"""The job accounting (jobs.accounting): counts kept by triggers equal GROUP BY over the table."""

import json
import threading

import pytest
from django.db import connection, connections

from jobs.accounting import counts, triggers
from jobs.models import Job, JobCount, JobCountDelta
from tests.foundation.test_embedded import embedded_env, manage
from tests.jobs import accounting_scenario as scenario
from tests.processes import Worker


def test_counts_equal_the_table_through_a_busy_run_on_postgresql(start_worker):
    start_worker(queues="default", concurrency=2)
    checks = []

    def check() -> None:
        accounting, table = scenario.snapshot()
        checks.append(table)
        assert accounting == table

    scenario.run(check)
    assert len(checks) == 6
    # Every kind of state was seen, live and final, and something was purged.
    seen = {status for table in checks for (_, _, status) in table}
    assert seen == {"queued", "running", "retrying", "succeeded", "dead", "cancelled"}
    assert sum(n for (q, _, _), n in checks[-1].items() if q == "moved") == 10

    counts.fold()
    assert JobCountDelta.objects.count() == 0
    totals = {(c.queue, c.task, c.status): c.n for c in JobCount.objects.exclude(n=0)}
    assert totals == scenario.table_counts()


@pytest.mark.slow
def test_counts_equal_the_table_through_a_busy_run_on_the_embedded_default(tmp_path):
    env = embedded_env(tmp_path)
    manage(env, "migrate", "--noinput")
    worker = Worker(env, queues="default", concurrency=2)
    try:
        out = manage(
            env,
            "shell",
            "-c",
            "import tests.jobtasks; from tests.jobs.accounting_scenario import main; main()",
            timeout=300,
        )
    finally:
        worker.stop()
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(report["checks"]) == 6
    for seen in report["checks"]:
        assert seen["accounting"] == seen["table"]
    statuses = {key.rsplit("/", 1)[1] for seen in report["checks"] for key in seen["table"]}
    assert statuses == {"queued", "running", "retrying", "succeeded", "dead", "cancelled"}
    folded = report["folded"]
    assert folded["accounting"] == folded["table"] and folded["deltas_left"] == 0


def test_a_lease_renewal_appends_no_delta_and_a_bulk_statement_one_per_group(transactional_db):
    from jobs import services

    services.enqueue_many("tests.record", [{}] * 500, queue="q1")
    services.enqueue_many("tests.record", [{}] * 500, queue="q2")
    assert JobCountDelta.objects.count() == 2
    Job.objects.update(lease_expires_at=None, locked_by="x")
    assert JobCountDelta.objects.count() == 2
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_job WHERE id IN (SELECT id FROM jobs_job LIMIT 700)")
    assert JobCountDelta.objects.count() in (3, 4)  # one per queue the batch touched
    assert counts.read() == scenario.table_counts()


def test_two_connections_folding_at_once_lose_nothing(transactional_db):
    from jobs import services

    for i in range(40):
        services.enqueue_many("tests.record", [{}] * 5, queue=f"q{i % 4}")
    Job.objects.filter(pk__in=Job.objects.order_by().values("pk")[:60]).update(status="running")
    Job.objects.filter(pk__in=Job.objects.order_by("pk").values("pk")[:30]).delete()
    assert JobCountDelta.objects.count() > 40
    expected = scenario.table_counts()
    barrier = threading.Barrier(2)
    errors = []

    def folder() -> None:
        try:
            barrier.wait()
            for _ in range(20):
                counts.fold(batch=3, max_batches=2)
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=folder) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    counts.fold()
    assert JobCountDelta.objects.count() == 0
    totals = {(c.queue, c.task, c.status): c.n for c in JobCount.objects.exclude(n=0)}
    assert totals == expected
    assert counts.read() == expected


def test_missing_triggers_are_put_back_with_the_counts_rebuilt(transactional_db):
    from jobs import services

    triggers.uninstall()
    services.enqueue_many("tests.record", [{}] * 7)
    assert counts.read() == {}
    assert triggers.ensure_installed() is True
    assert counts.read() == scenario.table_counts()
    services.enqueue("tests.record", {})
    assert counts.read() == scenario.table_counts()
    assert triggers.ensure_installed() is False
