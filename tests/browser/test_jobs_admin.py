"""An operator retries a dead job and creates an API token in the admin, in a real browser."""

from django.utils import timezone

from jobs.models import AuditLog, Job, JobStatus
from project.access.models import ApiToken
from project.access.tokens import token_authenticate


def make_job(status, **fields) -> Job:
    now = timezone.now()
    return Job.objects.create(
        task="tests.record", status=status, run_after=now, created_at=now, updated_at=now, **fields
    )


def test_retry_a_dead_job_from_the_job_list(admin_page, purge_broker):
    dead = make_job(JobStatus.DEAD, attempts=5, last_error="ConnectionError: receiver down")
    done = make_job(JobStatus.SUCCEEDED, attempts=1)
    page = admin_page
    page.goto("/admin/jobs/job/?status__exact=dead")
    assert page.locator("#result_list tbody tr").count() == 1
    assert "receiver down" in page.locator("#result_list").inner_text()
    page.check(f"input[name=_selected_action][value='{dead.pk}']")
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    assert "Re-queued 1 job(s)." in page.locator(".messagelist").inner_text()
    dead.refresh_from_db()
    done.refresh_from_db()
    assert dead.status == JobStatus.QUEUED and dead.attempts == 0
    assert done.status == JobStatus.SUCCEEDED
    assert AuditLog.objects.filter(
        action="job.retry", actor="admin", target_id=str(dead.pk)
    ).exists()


def test_create_an_api_token_shows_it_once(admin_page):
    page = admin_page
    page.goto("/admin/access/apitoken/add/")
    page.fill("#id_name", "github-actions")
    page.select_option("#id_scope", "deploy")
    page.click("input[name=_save]")
    message = page.locator(".messagelist").inner_text()
    raw = message.split("not shown again: ")[1].split()[0]
    token = token_authenticate(raw)
    assert token is not None and token.name == "github-actions" and token.scope == "deploy"
    assert ApiToken.objects.count() == 1
    page.goto("/admin/access/apitoken/")
    assert raw not in page.content()
