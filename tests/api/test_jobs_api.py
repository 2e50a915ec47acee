"""Queue and job endpoints, and the one error shape."""

import pytest
from django.utils import timezone

from jobs import services
from jobs.models import Job, JobStatus
from tests.api.conftest import assert_error

pytestmark = pytest.mark.usefixtures("purge_broker")


def make(status=JobStatus.QUEUED, **fields) -> Job:
    now = timezone.now()
    return Job.objects.create(
        task="tests.record", status=status, run_after=now, created_at=now, updated_at=now, **fields
    )


@pytest.mark.django_db
def test_queue_counts_by_status_queue_and_task(make_api):
    make(JobStatus.QUEUED)
    make(JobStatus.QUEUED, queue="webhooks")
    make(JobStatus.DEAD, last_error="boom")
    body = make_api("admin").get("/queue").json()
    assert body["by_status"]["queued"] == 2 and body["by_status"]["dead"] == 1
    assert body["by_queue"]["webhooks"]["queued"] == 1
    assert body["by_task"]["tests.record"]["dead"] == 1
    assert body["oldest_queued_age_seconds"] >= 0
    assert len(body["recent"]) == 3 and body["recent"][0]["last_error"] == "boom"
    assert make_api("read").get("/queue").json()["recent"][0]["last_error"] is None


@pytest.mark.django_db
def test_jobs_list_filters_and_paginates_with_a_link_header(make_api):
    ids = [make(JobStatus.DEAD).pk for _ in range(5)]
    make(JobStatus.SUCCEEDED)
    api = make_api("admin")
    first = api.get("/jobs", status="dead", limit=2)
    assert [j["id"] for j in first.json()] == ids[::-1][:2]
    link = first["Link"]
    assert 'rel="next"' in link and "before=" in link
    second = api.client.get(link.split(";")[0].strip("<>"), headers=api.headers)
    assert [j["id"] for j in second.json()] == ids[::-1][2:4]
    third = api.get("/jobs", status="dead", limit=2, before=ids[1])
    assert [j["id"] for j in third.json()] == [ids[0]] and not third.has_header("Link")


@pytest.mark.django_db
def test_job_detail_and_retry_conflicts(make_api):
    api = make_api("admin")
    dead = make(JobStatus.DEAD, attempts=5, last_error="boom")
    body = api.get(f"/jobs/{dead.pk}").json()
    assert (body["status"], body["attempts"], body["last_error"]) == ("dead", 5, "boom")
    retried = api.post(f"/jobs/{dead.pk}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "queued"
    assert retried.json()["attempts"] == 0
    assert_error(api.post(f"/jobs/{dead.pk}/retry"), 409, "conflict")
    missing = assert_error(api.get("/jobs/999999"), 404, "not_found")
    assert missing["message"] == "job 999999 does not exist"
    assert_error(api.post("/jobs/999999/retry"), 404, "not_found")


@pytest.mark.django_db
def test_cancel_a_queued_job_then_conflict(make_api):
    api = make_api("admin")
    job = make(JobStatus.QUEUED)
    response = api.post(f"/jobs/{job.pk}/cancel")
    assert response.status_code == 202 and response.json()["status"] == "cancelled"
    assert_error(api.post(f"/jobs/{job.pk}/cancel"), 409)


@pytest.mark.django_db
def test_every_kind_of_bad_request_gets_the_error_shape(make_api):
    api = make_api("admin")
    assert_error(api.get("/no/such/path"), 404)
    assert_error(api.client.delete("/api/v1/queue", headers=api.headers), 405)
    assert_error(api.get("/jobs", status="bogus"), 422, "invalid")
    error = assert_error(api.get("/jobs", limit=0), 422, "invalid")
    assert error["details"]["fields"][0]["field"].endswith("limit")
    assert_error(api.get("/jobs/abc"), 404)
    assert_error(api.get("/jobs", task="\x00"), 422)


@pytest.mark.django_db
def test_job_detail_carries_the_attempt_history(make_api):
    from jobs import services
    from tests.jobtasks import flaky_task

    job = services.enqueue("tests.flaky", {"fail_runs": 1})
    flaky_task(job.pk)  # in this process: the first run fails and the job is retried
    body = make_api("admin").get(f"/jobs/{job.pk}").json()
    assert (body["status"], body["reason"], body["attempts"]) == ("retrying", "error", 1)
    [entry] = body["attempts_history"]
    assert (entry["attempt"], entry["outcome"], entry["reason"]) == (1, "retrying", "error")
    assert entry["worker"].startswith("local/")
    assert entry["started_at"] <= entry["finished_at"]
    assert entry["error"]["class_path"] == "builtins.ConnectionError"
    assert entry["error"]["message"] == "transient failure on attempt 1"
    assert 'raise ConnectionError(f"transient failure' in entry["error"]["traceback"]


@pytest.mark.django_db
def test_the_job_api_shows_the_unique_key_and_period(make_api):
    job = services.enqueue("tests.unique_record", {"customer": 1})
    body = make_api("admin").get(f"/jobs/{job.pk}").json()
    assert body["unique_key"] == Job.objects.get(pk=job.pk).unique_key
    assert body["unique_period_seconds"] == 300
    assert body["unique_states"] == ["queued", "running", "retrying", "succeeded"]


@pytest.mark.django_db
def test_retrying_a_cancelled_unique_job_whose_key_is_taken_is_a_conflict(make_api):
    api = make_api("admin")
    first = services.enqueue("tests.unique_record", {"customer": 1})
    assert api.post(f"/jobs/{first.pk}/cancel").status_code == 202
    services.enqueue("tests.unique_record", {"customer": 1})
    error = assert_error(api.post(f"/jobs/{first.pk}/retry"), 409, "conflict")
    assert "unique key" in error["message"]
