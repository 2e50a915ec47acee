"""A workflow node's end, the mark of its edges and the "ready?" question in one message
(jobs.workflows.release.end_and_advance): two round trips when nothing is released, the
release in the same transaction when something is, and nothing written when it fails."""

import pytest
from django.db import DataError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import completer, conf, services, statements, workflows
from jobs.models import Job, JobDependency, JobStatus
from jobs.workflows import release
from tests.workflows.conftest import enqueue

S = JobStatus
pytestmark = pytest.mark.django_db(transaction=True)


def _claimed_chord(members: int) -> tuple[list[Job], Job]:
    flow = enqueue(
        workflows.chord(
            [("tests.wf.add", {"n": n}) for n in range(members)], ("tests.wf.collect", {})
        )
    )
    *nodes, callback = Job.objects.filter(workflow=flow).order_by("id")
    return [services.job_claim(node.pk, worker="w/1") for node in nodes], callback


def _preparing() -> bool:
    """Whether this connection sends the engine's statements prepared (jobs.prepared)."""
    return connection.vendor == "postgresql" and conf.get().prepared_statements


def _successes(runs: list[Job]) -> list[statements.Success]:
    return [statements.Success(run, str(run.pk), run.started_at, timezone.now()) for run in runs]


def test_a_chunk_that_releases_nothing_costs_two_round_trips_and_the_last_releases():
    runs, callback = _claimed_chord(6)
    completer.succeed_many(_successes(runs[:2]))  # this connection prepares the statements
    with CaptureQueriesContext(connection) as queries:
        settled = completer.succeed_many(_successes(runs[2:4]))
    assert [succeeded for _, succeeded in settled] == [True] * 2
    assert [query["sql"].split(";")[0] for query in queries] == ["BEGIN", "COMMIT"]
    if _preparing():  # sent as the prepared statements (jobs.prepared)
        assert queries[0]["sql"].count("; EXECUTE conveyor_") == 3
    callback.refresh_from_db()
    assert callback.status == S.WAITING
    released: list[Job] = []
    with CaptureQueriesContext(connection) as queries:
        completer.succeed_many(_successes(runs[4:]), released=released)
    assert queries[-1]["sql"] == "COMMIT"  # the release came before it, in that transaction
    callback.refresh_from_db()
    assert [job.pk for job in released] == [callback.pk] and callback.status == S.QUEUED
    assert [m["result"] for m in callback.payload["members"]] == [run.pk for run in runs]
    # the members were written, not read back: the released row comes without its payload
    (release_update,) = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assert '"payload"' in release_update.split("RETURNING")[0]
    assert '"payload"' not in release_update.split("RETURNING")[1]
    assert released[0].get_deferred_fields() == {"payload"}
    assert released[0].payload == callback.payload  # read when asked for


def test_a_chunk_and_its_claim_release_the_callback_with_them():
    runs, callback = _claimed_chord(3)
    released: list[Job] = []
    settled, claimed = completer.succeed_many_and_claim(
        _successes(runs),
        runs[0].pk,
        5,
        plan=None,
        task="tests.wf.add",
        worker="w/1",
        released=released,
    )
    assert len(settled) == 3 and claimed == []  # nothing else queued: the callback waited
    assert [job.pk for job in released] == [callback.pk]
    assert Job.objects.get(pk=callback.pk).status == S.QUEUED


def test_a_run_taken_away_meanwhile_marks_no_edge():
    runs, callback = _claimed_chord(2)
    Job.objects.filter(pk=runs[1].pk).update(locked_by="someone/else")
    settled = completer.succeed_many(_successes(runs))
    assert [job.pk for job, _ in settled] == [runs[0].pk]
    assert Job.objects.get(pk=runs[1].pk).status == S.RUNNING
    callback.refresh_from_db()
    assert callback.status == S.WAITING  # its second edge waits for whoever ends that run
    assert JobDependency.objects.filter(dependant=callback, done=False).count() == 1


def test_a_failing_message_writes_nothing_and_leaves_the_connection_usable(monkeypatch):
    runs, callback = _claimed_chord(2)
    monkeypatch.setattr(release, "_READY", f"{release._READY} AND 1 / 0 = 1")
    with pytest.raises(DataError):
        completer.succeed_many(_successes(runs))
    monkeypatch.undo()
    assert Job.objects.filter(pk__in=[run.pk for run in runs], status=S.RUNNING).count() == 2
    assert connection.connection.info.transaction_status.name == "IDLE"
    assert not connection.in_atomic_block and connection.get_autocommit()
    completer.succeed_many(_successes(runs))
    assert Job.objects.get(pk=callback.pk).status == S.QUEUED


def test_inside_the_callers_transaction_it_keeps_to_an_atomic_block():
    from django.db import transaction

    runs, callback = _claimed_chord(1)
    with transaction.atomic():
        assert not release.in_one_message()
        completer.succeed_many(_successes(runs))
        assert Job.objects.get(pk=callback.pk).status == S.QUEUED
    assert release.in_one_message()
    with connection.cursor() as cursor:  # a transaction Django does not know of
        cursor.execute("BEGIN")
        assert not release.in_one_message()
        cursor.execute("ROLLBACK")


def test_a_prepared_statement_the_server_lost_is_sent_again_as_text_and_nothing_is_lost():
    if not _preparing():
        pytest.skip("no prepared statements here (PostgreSQL's, CONVEYOR_PREPARED_STATEMENTS)")
    runs, callback = _claimed_chord(2)
    completer.succeed_many(_successes(runs[:1]))  # prepares them
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # as a pooler's DISCARD ALL would
    released: list[Job] = []
    with CaptureQueriesContext(connection) as queries:
        settled = completer.succeed_many(_successes(runs[1:]), released=released)
    assert [succeeded for _, succeeded in settled] == [True]
    assert [job.pk for job in released] == [callback.pk]
    assert Job.objects.get(pk=callback.pk).status == S.QUEUED
    sent = [query["sql"] for query in queries]
    assert "EXECUTE" in sent[0] and sent[1] == "ROLLBACK"  # the first try, rolled back
    assert sent[2].startswith("BEGIN; \nUPDATE") and "EXECUTE" not in sent[2]
