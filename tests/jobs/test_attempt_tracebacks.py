"""The job page shows each failed attempt's traceback, collapsed, with URL passwords masked."""

from django.test import Client

from jobs import attempts, services
from jobs.models import Job, JobStatus
from tests.jobs.test_execution import wait_for_status


def _page(admin_user, job: Job) -> str:
    client = Client()
    client.force_login(admin_user)
    response = client.get(f"/admin/jobs/job/{job.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_failed_attempts_traceback_is_on_the_job_page(start_worker, admin_user):
    start_worker(concurrency=1, queues="default")
    job = wait_for_status(services.enqueue("tests.permanent", {}), JobStatus.DEAD)
    page = _page(admin_user, job)
    assert '<details class="attempt-traceback"><summary>traceback</summary>' in page
    assert "Traceback (most recent call last)" in page
    assert "in permanent_task" in page  # the frame that raised, from tests/jobtasks.py
    assert "Permanent: this can never work" in page


def test_a_traceback_shows_no_password_and_a_success_shows_none(transactional_db, admin_user):
    try:
        raise ConnectionError("cannot fetch https://deploy:hunter2-secret@git.example.com/r.git")
    except ConnectionError as exc:
        error = attempts.error_info(exc)
    assert "hunter2-secret" not in error["traceback"] + error["message"]  # masked when stored
    assert "https://deploy:***@git.example.com/r.git" in error["message"]
    error["traceback"] += "\nhttps://old:stored-before-masking@example.com/"  # an older row
    job = services.enqueue("jobs.noop", {})
    entry = {"attempt": 1, "worker": "w/1", "outcome": "dead", "reason": "permanent"}
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.DEAD,
        attempts_history=[{**entry, "error": error}, {**entry, "attempt": 2, "error": None}],
    )
    page = _page(admin_user, job)
    assert page.count('class="attempt-traceback"') == 1
    assert "hunter2-secret" not in page and "stored-before-masking" not in page
    assert "https://deploy:***@git.example.com/r.git" in page
