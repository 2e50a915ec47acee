"""The job purge: one statement per batch, dependents in SQL, in-flight retries kept."""

import re
import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import conf
from jobs.maintenance.purge import purge
from jobs.models import Job, JobStatus
from project import batch_delete
from webhooks import services as webhook_services
from webhooks.models import Delivery, DeliveryStatus, Event

S = JobStatus
NOW = timezone.now()
SECOND = timedelta(seconds=1)


@pytest.fixture(params=["postgresql", "sqlite"])
def vendor(request, monkeypatch):
    """Run the test on PostgreSQL's one-statement path and on the embedded fallback."""
    if request.param != "postgresql":
        monkeypatch.setattr(connection, "vendor", "sqlite")
    return request.param


@pytest.fixture
def cutoffs() -> dict[str, timezone.datetime]:
    options = conf.get()
    now = timezone.now()  # not the module's NOW: a test may run minutes after collection
    completed, dead = now - options.completed_retention, now - options.dead_retention
    return {S.SUCCEEDED: completed, S.CANCELLED: completed, S.DEAD: dead}


def make(status: str, finished_at=None, **fields) -> Job:
    return Job.objects.create(
        task="tests.record",
        status=status,
        run_after=NOW,
        created_at=NOW - timedelta(days=60),
        updated_at=NOW,
        finished_at=finished_at,
        **fields,
    )


@pytest.mark.django_db
def test_each_final_status_goes_exactly_past_its_own_cutoff(cutoffs, vendor):
    doomed, kept = [], []
    for status, cutoff in cutoffs.items():
        doomed += [make(status, cutoff - timedelta(minutes=1)), make(status, cutoff - SECOND)]
        kept += [make(status, cutoff + timedelta(minutes=1)), make(status, NOW)]
    # Live rows never go, however old.
    kept += [make(live) for live in (S.QUEUED, S.RUNNING, S.RETRYING)]
    kept.append(make(S.DEAD, cutoffs[S.SUCCEEDED] - timedelta(days=1)))  # dead keeps longer

    result = purge(batch_size=3)

    assert (result.completed, result.dead) == (4, 2)
    assert set(Job.objects.values_list("pk", flat=True)) == {job.pk for job in kept}


@pytest.mark.django_db
def test_a_webhook_delivery_keeps_its_row_and_loses_its_link_to_a_purged_job(cutoffs, vendor):
    event = Event.objects.create(type="job.dead", body="{}", created_at=NOW)
    expired = make(S.SUCCEEDED, cutoffs[S.SUCCEEDED] - SECOND)
    young = make(S.SUCCEEDED, NOW)
    linked = {
        job: Delivery.objects.create(
            event=event,
            endpoint=webhook_services.endpoint_create(url=url, topics=["job.dead"]),
            status=DeliveryStatus.DELIVERED,
            job=job,
            created_at=NOW,
            updated_at=NOW,
        )
        for job, url in ((expired, "https://93.184.215.14/a"), (young, "https://93.184.215.14/b"))
    }

    assert purge().completed == 1

    linked[expired].refresh_from_db()
    linked[young].refresh_from_db()
    assert linked[expired].job_id is None
    assert linked[young].job_id == young.pk
    assert not Job.objects.filter(pk=expired.pk).exists()


@pytest.mark.django_db
def test_each_batch_is_one_delete_statement_on_its_index_and_a_short_batch_stops(cutoffs):
    for _ in range(5):
        make(S.SUCCEEDED, cutoffs[S.SUCCEEDED] - timedelta(hours=1))
    for _ in range(4):
        make(S.DEAD, cutoffs[S.DEAD] - timedelta(hours=1))

    with CaptureQueriesContext(connection) as queries:
        result = purge(batch_size=2)

    assert (result.completed, result.dead) == (5, 4)
    on_jobs = [
        q["sql"]
        for q in queries.captured_queries
        if '"jobs_job"' in q["sql"] and 'DELETE FROM "jobs_workflow"' not in q["sql"]
    ]
    # succeeded 2+2+1 (short: stop), cancelled 0, dead 2+2+0: seven statements, no others.
    assert len(on_jobs) == 7, on_jobs
    for sql in on_jobs:
        assert sql.startswith('WITH gone(id, key) AS (DELETE FROM "jobs_job" WHERE'), sql
        assert re.search(r'ORDER BY [UV]0\."finished_at" ASC LIMIT 2\)', sql), sql
        # the choice keeps workflows that are running (or, but for dead jobs, have a dead
        # job), one probe per row; the DELETE does not check it again
        choice = sql[sql.index("IN (SELECT") :]
        assert sql.count("NOT EXISTS(") == choice.count("NOT EXISTS(") == 1, sql
        assert '"jobs_job"."payload"' not in sql and '"jobs_job"."task"' not in sql


@pytest.mark.django_db(transaction=True)
def test_a_job_retried_while_the_purge_runs_is_kept(cutoffs):
    """An operator's retry holds the row when the purge reaches it: the purge passes it by."""
    retried = make(S.DEAD, cutoffs[S.DEAD] - timedelta(hours=1))
    other = make(S.DEAD, cutoffs[S.DEAD] - timedelta(hours=2))
    settings = connection.settings_dict
    operator = psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        host=settings["HOST"],
        port=settings["PORT"] or None,
    )
    try:
        operator.execute(
            "UPDATE jobs_job SET status = 'queued', finished_at = NULL WHERE id = %s",
            [retried.pk],
        )
        # The retry commits a moment later, while the purge may be waiting for the row.
        commit = threading.Timer(1.0, operator.commit)
        commit.start()
        result = purge(batch_size=10)
        commit.join()
    finally:
        operator.close()

    assert result.dead == 1
    assert list(Job.objects.values_list("pk", "status")) == [(retried.pk, S.QUEUED)]
    assert not Job.objects.filter(pk=other.pk).exists()


@pytest.mark.django_db
def test_the_pause_between_batches_is_taken_only_between_full_batches(cutoffs, monkeypatch):
    pauses = []
    monkeypatch.setattr(batch_delete.time, "sleep", pauses.append)
    for _ in range(4):
        make(S.SUCCEEDED, cutoffs[S.SUCCEEDED] - timedelta(hours=1))

    deleted = batch_delete.delete_in_batches(
        Job.objects.filter(status=S.SUCCEEDED), order_by="finished_at", batch_size=2
    )

    assert deleted == 4
    assert pauses == [batch_delete.PAUSE_BETWEEN_BATCHES] * 2  # after 2 and 2, not after 0


@pytest.mark.django_db
def test_each_batch_starts_where_the_last_one_ended_and_ties_across_it_all_go(cutoffs, vendor):
    old = cutoffs[S.SUCCEEDED] - timedelta(hours=1)
    firsts = [make(S.SUCCEEDED, old - timedelta(minutes=1)) for _ in range(2)]
    ties = [make(S.SUCCEEDED, old) for _ in range(3)]  # one batch cannot take them all
    kept = make(S.SUCCEEDED, NOW)

    with CaptureQueriesContext(connection) as queries:
        deleted = batch_delete.delete_in_batches(
            Job.objects.filter(status=S.SUCCEEDED, finished_at__lt=cutoffs[S.SUCCEEDED]),
            order_by="finished_at",
            batch_size=2,
            pause=0,
        )

    assert deleted == len(firsts) + len(ties)
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    choices = [q["sql"] for q in queries.captured_queries if "ORDER BY" in q["sql"]]
    assert len(choices) == 3  # 2 + 2 + 1
    assert '"finished_at" >=' not in choices[0]
    assert all('"finished_at" >=' in sql for sql in choices[1:])


@pytest.mark.parametrize(
    ("size", "took", "most", "expected"),
    [
        (1000, 0.9, 1000, 500),  # slow: halve
        (60, 0.9, 1000, 50),  # never below the floor
        (10, 0.9, 10, 10),  # nor below a smaller batch asked for
        (250, 0.01, 1000, 500),  # fast: double
        (800, 0.01, 1000, 1000),  # never above the batch asked for
        (500, 0.1, 1000, 500),  # in between: keep
    ],
)
def test_the_next_batch_follows_how_long_the_last_one_took(size, took, most, expected):
    assert batch_delete.next_batch_size(size, took, most) == expected


@pytest.mark.django_db
def test_slow_batches_shrink_the_next_ones_and_every_row_still_goes(cutoffs, monkeypatch):
    monkeypatch.setattr(batch_delete, "STATEMENT_TARGET_SECONDS", 0.0)  # every batch is slow
    monkeypatch.setattr(batch_delete, "MIN_BATCH_SIZE", 1)
    for minute in range(20):
        make(S.SUCCEEDED, cutoffs[S.SUCCEEDED] - timedelta(hours=1, minutes=minute))

    with CaptureQueriesContext(connection) as queries:
        deleted = batch_delete.delete_in_batches(
            Job.objects.filter(status=S.SUCCEEDED), order_by="finished_at", batch_size=8, pause=0
        )

    assert deleted == 20 and not Job.objects.exists()
    limits = [
        int(q["sql"].split("LIMIT ")[1].split(")")[0])
        for q in queries.captured_queries
        if "LIMIT" in q["sql"]
    ]
    assert limits == [8, 4, 2, 1, 1, 1, 1, 1, 1, 1]  # 8+4+2+6×1, then an empty batch stops


@pytest.mark.django_db
def test_a_big_waiting_workflow_costs_the_purge_one_index_probe_per_row_of_a_workflow(cutoffs):
    """The kept workflows are asked about row by row on their own index: a 20,000-node group
    waiting is never read whole by each batch (nor again for each row, once past the hash
    memory)."""
    from jobs.workflows.state import outside_running_workflows, outside_workflows_kept_whole

    with connection.cursor() as cursor:  # a waiting group of 20,000 and an expired history
        cursor.execute(
            "INSERT INTO jobs_job (task, queue, payload, status, priority, attempts, "
            "max_attempts, run_after, locked_by, last_error, reason, attempts_history, "
            "publish_count, created_at, updated_at, finished_at, unique_states, limit_key, "
            "workflow_id) SELECT 'tests.record', 'default', '{}', "
            "CASE WHEN g <= 20000 THEN 'waiting' ELSE 'succeeded' END, 0, 0, 1, now(), '', "
            "'', '', '[]', 0, now(), now(), CASE WHEN g > 20000 THEN %s END, '', '', "
            "CASE WHEN g <= 20000 THEN 1 ELSE 2 + g %% 100 END "
            "FROM generate_series(1, 40000) AS g",
            [cutoffs[S.SUCCEEDED] - timedelta(days=1)],
        )
        cursor.execute("ANALYZE jobs_job")
    for kept, status in (
        (outside_running_workflows, S.DEAD),
        (outside_workflows_kept_whole, S.SUCCEEDED),
    ):
        choice = Job.objects.filter(kept(), status=status, finished_at__lt=cutoffs[status])
        plan = choice.order_by("finished_at").values("pk")[:1000].explain()
        assert "job_workflow_open_idx" in plan, plan
        assert "hashed SubPlan" not in plan and "Materialize" not in plan, plan
