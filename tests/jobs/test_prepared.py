"""jobs.prepared: the hot statements as prepared statements, on a real PostgreSQL connection.

Outside a transaction (as a worker claims and ends runs) the claim and the end are prepared
once per connection and then sent as ``EXECUTE``; inside one a statement not yet prepared is
sent as text. Each case reads back the rows and the server's own list of prepared statements.
"""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import completer, limiter, prepared, services, statements
from jobs.limits import Limit
from jobs.models import Job, JobStatus

TASK = "tests.record"
WORKER = "node/1"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_postgresql_connection():
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    connection.close()  # no statement prepared by an earlier test
    yield
    connection.close()


def queued(priority: int = 0) -> Job:
    job = services.enqueue(TASK, {}, priority=priority)
    Job.objects.filter(pk=job.pk).update(run_after=timezone.now() - timedelta(seconds=5))
    return job


CLAIM = prepared.name_of(statements._claim_sql("postgresql", one=True))
CLAIM_EXACTLY = prepared.name_of(statements._claim_sql("postgresql", True, one=True))
END_ID = prepared.name_of(f"{statements._end_sql('postgresql')} RETURNING id")
SUCCESSES_AND_CLAIM = prepared.name_of(statements._successes_and_claim_sql())


def server_prepared() -> dict[str, tuple[int, int]]:
    """The server's prepared statements on this connection: name → (generic, custom) plans."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE name LIKE 'conveyor_%%'"
        )
        rows = cursor.fetchall()
    return {name: (generic, custom) for name, generic, custom in rows}


def succeed(run: Job) -> set[int]:
    ran = statements.Success(run, '"done"', run.started_at, timezone.now())
    return statements.end_successes([ran])


def test_outside_a_transaction_the_claim_and_the_end_are_prepared_once_and_executed():
    low, high = queued(priority=0), queued(priority=5)
    with CaptureQueriesContext(connection) as first:
        run = statements.claim(low.pk, task=TASK, worker=WORKER)
    assert run.pk == high.pk  # still the best runnable job of the queue, not the one named
    assert [q["sql"].split(" ", 1)[0] for q in first.captured_queries] == ["SET", "EXECUTE"]
    prepare = first.captured_queries[0]["sql"]
    assert f"PREPARE {CLAIM} AS WITH" in prepare
    with CaptureQueriesContext(connection) as second:
        again = statements.claim(low.pk, task=TASK, worker=WORKER)
    assert again.pk == low.pk
    assert len(second.captured_queries) == 1
    assert second.captured_queries[0]["sql"].startswith(f"EXECUTE {CLAIM}(")
    assert succeed(run) == {run.pk}
    assert Job.objects.get(pk=run.pk).status == JobStatus.SUCCEEDED
    plans = server_prepared()
    assert plans[CLAIM] == (2, 0)  # the generic plan both times, never re-planned
    assert plans[END_ID] == (1, 0)


def test_an_ended_run_is_fenced_the_same_when_prepared():
    run = statements.claim(queued().pk, task=TASK, worker=WORKER)
    assert succeed(run) == {run.pk}
    assert succeed(run) == set()  # the run is over: the fence refuses it a second time
    assert server_prepared()[END_ID][0] == 2


def test_inside_a_transaction_a_statement_not_yet_prepared_is_sent_as_text():
    job = queued()
    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        run = statements.claim(job.pk, task=TASK, worker=WORKER)
    assert run.pk == job.pk
    assert inside.captured_queries[0]["sql"].startswith("WITH ")
    assert server_prepared() == {}


def test_a_statement_prepared_earlier_is_executed_inside_a_transaction_too():
    statements.claim(queued().pk, task=TASK, worker=WORKER)
    job = queued()
    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        run = statements.claim(job.pk, task=TASK, worker=WORKER)
    assert run.pk == job.pk
    assert inside.captured_queries[0]["sql"].startswith(f"EXECUTE {CLAIM}(")


def test_a_session_reset_under_the_engine_sends_text_from_then_on(caplog):
    statements.claim(queued().pk, task=TASK, worker=WORKER)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # what a pooler's DISCARD ALL does
    job, later = queued(), queued()
    with CaptureQueriesContext(connection) as sent:
        run = statements.claim(job.pk, task=TASK, worker=WORKER)
        again = statements.claim(later.pk, task=TASK, worker=WORKER)
    assert (run.pk, again.pk) == (job.pk, later.pk)
    # the lost statement's EXECUTE fails; its text is sent instead, and from then on
    assert [q["sql"][:8] for q in sent.captured_queries] == ["EXECUTE ", "WITH tar", "WITH tar"]
    warnings = [r.message for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["job.prepared_statements_off"]


def test_a_success_the_server_lost_inside_a_limited_claims_transaction_is_written_again(caplog):
    first, second, third = queued(), queued(), queued()
    run = statements.claim(first.pk, task=TASK, worker=WORKER, exact=True)
    completer.succeed_many([statements.Success(run, "1", run.started_at, timezone.now())])
    run = statements.claim(second.pk, task=TASK, worker=WORKER, exact=True)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # the success's statement is gone
    plan = limiter.Plan(limit=Limit(rate="1000/s"))  # a rate: the limiter's own transaction
    ran = statements.Success(run, "2", run.started_at, timezone.now())
    settled, claimed = completer.succeed_many_and_claim(
        [ran], third.pk, 1, plan=plan, task=TASK, worker=WORKER
    )
    assert [(job.pk, succeeded) for job, succeeded in settled] == [(second.pk, True)]
    assert [job.pk for job in claimed] == [third.pk]
    assert Job.objects.get(pk=second.pk).status == JobStatus.SUCCEEDED  # once, not retried
    assert Job.objects.get(pk=second.pk).attempts == 1
    warnings = [r.message for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["job.prepared_statements_off"]


def test_a_write_sent_again_after_a_lost_statement_starts_from_the_runs_as_they_were():
    job = queued()
    run = statements.claim(job.pk, task=TASK, worker=WORKER)
    ran = statements.Success(run, "1", run.started_at, timezone.now())
    seen = []

    def write():
        seen.append((run.status, run.locked_by))
        completer._succeeded(ran)  # the in-memory run changes before the statement fails
        if len(seen) == 1:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("EXECUTE conveyor_gone")  # the server does not know it
        return "written"

    assert completer._once_more_if_lost(write, [ran]) == "written"
    assert seen == [(JobStatus.RUNNING, WORKER)] * 2  # its fences as the row has them


def test_a_statement_of_the_same_name_already_there_is_left_alone_and_text_sent():
    with connection.cursor() as cursor:  # as another client's, on a pooler's shared session
        cursor.execute(f"PREPARE {CLAIM} AS SELECT 1")
    job = queued()
    run = statements.claim(job.pk, task=TASK, worker=WORKER)
    assert run.pk == job.pk
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
    with CaptureQueriesContext(connection) as sent:
        statements.claim(job.pk, task=TASK, worker=WORKER)
    assert sent.captured_queries[0]["sql"].startswith("WITH ")


def test_the_setting_off_sends_the_text_every_time(settings):
    settings.CONVEYOR_PREPARED_STATEMENTS = False
    job = queued()
    with CaptureQueriesContext(connection) as sent:
        run = statements.claim(job.pk, task=TASK, worker=WORKER)
    assert run.pk == job.pk
    assert [q["sql"][:5] for q in sent.captured_queries] == ["WITH "]
    assert server_prepared() == {}


def test_placeholders_are_numbered_and_escaped_percent_signs_kept():
    sql = "SELECT %s, %s FROM t WHERE name LIKE 'a%%' AND id = %s"
    assert prepared._prepare("x", sql) == (
        "PREPARE x AS SELECT $1, $2 FROM t WHERE name LIKE 'a%' AND id = $3"
    )


@pytest.mark.parametrize(("limited", "claims"), [({"other": 1}, True), ({"default": 2}, False)])
def test_a_claim_leaves_a_limited_queue_to_the_limiter_when_prepared_too(settings, limited, claims):
    settings.CONVEYOR_QUEUE_CONCURRENCY = limited
    job = queued()
    statements.claim(job.pk, task=TASK, worker=WORKER)  # prepares
    assert CLAIM in server_prepared()
    if claims:
        assert statements.claim(queued().pk, task=TASK, worker=WORKER) is not None
    else:  # the job's queue is limited: only the limiter's claim takes it
        assert statements.claim(job.pk, task=TASK, worker=WORKER) is None
        assert Job.objects.get(pk=job.pk).status == JobStatus.QUEUED


def test_a_chunks_successes_and_the_next_claim_are_one_prepared_statement():
    first, second = queued(), queued()
    run = statements.claim(first.pk, task=TASK, worker=WORKER, exact=True)
    ran = statements.Success(run, "1", run.started_at, timezone.now())
    with CaptureQueriesContext(connection) as sent:
        ended, claimed = statements.end_successes_and_claim(
            [ran], first.pk, task=TASK, worker=WORKER, count=5
        )
    assert ended == {first.pk}
    assert [job.pk for job in claimed] == [second.pk]
    assert sent.captured_queries[-1]["sql"].startswith(f"EXECUTE {SUCCESSES_AND_CLAIM}(")
    assert set(server_prepared()) == {CLAIM_EXACTLY, SUCCESSES_AND_CLAIM}


def test_a_column_a_statement_returns_changed_by_a_migration_sends_text_from_then_on():
    statements.claim(queued().pk, task=TASK, worker=WORKER)  # prepared: RETURNING locked_by
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE jobs_job ALTER COLUMN locked_by TYPE varchar(250)")
    try:
        job = queued()
        run = statements.claim(job.pk, task=TASK, worker=WORKER)  # the stale plan, then text
        assert run.pk == job.pk
        later = queued()
        with CaptureQueriesContext(connection) as sent:
            assert statements.claim(later.pk, task=TASK, worker=WORKER).pk == later.pk
        assert sent.captured_queries[0]["sql"].startswith("WITH ")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE jobs_job ALTER COLUMN locked_by TYPE varchar(200)")


def test_with_server_side_binding_nothing_is_prepared_here():
    options = connection.settings_dict.setdefault("OPTIONS", {})
    options["server_side_binding"] = True
    connection.close()
    try:
        job = queued()
        with CaptureQueriesContext(connection) as sent:
            run = statements.claim(job.pk, task=TASK, worker=WORKER)
        assert run.pk == job.pk
        assert sent.captured_queries[0]["sql"].startswith("WITH ")
        assert server_prepared() == {}
    finally:
        del options["server_side_binding"]
        connection.close()
