"""enqueue(): validation, idempotency keys under concurrency, bulk enqueue."""

import threading
from datetime import datetime, timedelta

import pytest
from django.db import close_old_connections, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import services
from jobs.models import Job, JobStatus


@pytest.mark.django_db
def test_an_unknown_task_is_refused():
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        services.enqueue("nope", {})
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_a_plain_celery_task_is_refused():
    with pytest.raises(ValueError, match="'maintenance.reap_jobs' is a plain Celery task"):
        services.enqueue("maintenance.reap_jobs", {})
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("payload", "options", "message"),
    [
        ({"at": datetime(2026, 1, 1)}, {}, "payload holds a datetime, which JSON cannot store"),
        ({"x": [float("inf")]}, {}, "payload holds inf, which JSON cannot store"),
        ({(1, 2): 3}, {}, "payload has a tuple key, which JSON cannot store"),
        ({}, {"max_attempts": -1}, "max_attempts is between 1 and"),
        ({}, {"queue": "q" * 101}, "queue is a name of 1 to 100 characters"),
        ({}, {"queue": 123}, "queue is a name of 1 to 100 characters, not 123"),
    ],
    ids=["datetime", "infinity", "tuple-key", "attempts", "long-queue", "queue-number"],
)
def test_what_a_job_row_cannot_hold_is_refused_with_a_clear_error(payload, options, message):
    with pytest.raises(ValueError, match=message):
        services.enqueue("tests.record", payload, **options)
    with pytest.raises(ValueError, match=message):
        services.enqueue_many("tests.record", [{"fine": 1}, payload], **options)
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    "payload",
    [{"name": "a\x00b"}, {"a\x00": 1}, {"deep": [{"list": ["ok", "\x00"]}]}],
    ids=["value", "key", "nested"],
)
def test_a_payload_with_a_nul_character_is_refused_with_nothing_written(payload):
    with pytest.raises(ValueError, match="cannot hold a NUL character"):
        services.enqueue("tests.record", payload)
    with pytest.raises(ValueError, match="cannot hold a NUL character"):
        services.enqueue_many("tests.record", [{"fine": 1}, payload])
    assert Job.objects.count() == 0
    job = services.enqueue("tests.record", {"text": "a\\u0000b"})  # the six characters
    assert Job.objects.get(pk=job.pk).payload == {"text": "a\\u0000b"}


@pytest.mark.django_db
def test_a_payload_nested_too_deeply_is_refused():
    payload: dict = {}
    for _ in range(5000):
        payload = {"a": payload}
    with pytest.raises(ValueError, match="nested too deeply"):
        services.enqueue("tests.record", payload)
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_options_are_stored_and_task_defaults_apply():
    run_after = timezone.now() + timedelta(hours=1)
    job = services.enqueue(
        "tests.record", {"a": 1}, priority=5, run_after=run_after, max_attempts=9
    )
    job.refresh_from_db()
    assert (job.task, job.queue, job.payload) == ("tests.record", "default", {"a": 1})
    assert (job.priority, job.max_attempts, job.run_after) == (5, 9, run_after)
    assert job.status == JobStatus.QUEUED and job.attempts == 0


@pytest.mark.django_db
def test_a_repeated_idempotency_key_returns_the_first_job():
    first = services.enqueue("tests.record", {"n": 1}, idempotency_key="deploy-42")
    second = services.enqueue("tests.record", {"n": 2}, idempotency_key="deploy-42")
    assert second.pk == first.pk
    assert Job.objects.count() == 1


def test_eight_threads_enqueueing_one_key_make_one_job(transactional_db, purge_broker):
    barrier = threading.Barrier(8)
    ids, errors = [], []

    def enqueue_one(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            with transaction.atomic():
                ids.append(services.enqueue("tests.record", {"n": n}, idempotency_key="same").pk)
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=enqueue_one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(ids) == 8 and len(set(ids)) == 1
    assert Job.objects.filter(idempotency_key="same").count() == 1


@pytest.mark.django_db
def test_enqueue_many_writes_in_bulk():
    with CaptureQueriesContext(connection) as queries:
        jobs = services.enqueue_many(
            "tests.record", [{"n": i} for i in range(2500)], batch_size=1000
        )
    inserts = [q for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 3
    assert len({j.pk for j in jobs}) == 2500
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 2500
