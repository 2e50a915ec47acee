"""/api/v1/queue, /metrics, the dashboard's refresh and the Jobs changelist read the accounting.

Each agrees with GROUP BY over jobs_job, and none of their queries counts, groups or
DISTINCTs the job table (they may read a page of it by id, or one row per queue by index).
"""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import changelist, services
from jobs.accounting import rollup
from jobs.models import Job, JobStatus
from tests.api.conftest import make_api  # noqa: F401 - fixture
from tests.console.test_console import client, samples
from tests.jobs.accounting_scenario import table_counts

pytestmark = pytest.mark.django_db
S = JobStatus
SCANS = re.compile(r"\b(count\(|group by|distinct|min\(|max\()", re.IGNORECASE)


def job_table_scans(queries) -> list[str]:
    """The captured statements that aggregate over jobs_job (by count, group, distinct...)."""
    return [
        q["sql"]
        for q in queries
        if re.search(r'\bFROM "?jobs_job"?(\s|$)', q["sql"]) and SCANS.search(q["sql"])
    ]


@pytest.fixture
def jobs():
    """Jobs in every state on two queues, some ended a few minutes ago with known times."""
    now = timezone.now()
    services.enqueue_many("tests.record", [{}] * 6)
    services.enqueue_many("tests.flaky", [{}] * 4, queue="other")
    services.enqueue_many("tests.permanent", [{}] * 5)
    ids = list(Job.objects.order_by("pk").values_list("pk", flat=True))
    moves = {
        S.RUNNING: ids[0:2],
        S.RETRYING: ids[6:7],
        S.SUCCEEDED: ids[2:5] + ids[7:9],
        S.DEAD: ids[10:13],
        S.CANCELLED: ids[13:14],
    }
    for status, chosen in moves.items():
        Job.objects.filter(pk__in=chosen).update(
            status=status,
            run_after=now - timedelta(minutes=1, seconds=3),
            started_at=now - timedelta(minutes=1),
            finished_at=now - timedelta(seconds=30) if status in (S.SUCCEEDED, S.DEAD) else None,
        )
    Job.objects.filter(pk=ids[5]).update(run_after=now - timedelta(seconds=90))
    rollup.refresh()
    return now


def test_the_queue_api_agrees_with_the_table_without_scanning_it(jobs, make_api):  # noqa: F811
    api = make_api("admin")
    with CaptureQueriesContext(connection) as queries:
        body = api.get("/queue").json()
    table = table_counts()
    for queue, task, status in table:
        assert body["by_queue"][queue][status] == sum(
            m for (q, _, s), m in table.items() if (q, s) == (queue, status)
        )
        assert body["by_task"][task][status] == sum(
            m for (_, t, s), m in table.items() if (t, s) == (task, status)
        )
    for status in S.values:
        assert body["by_status"][status] == Job.objects.filter(status=status).count()
    assert body["running"] == 2
    assert 85 <= body["oldest_queued_age_seconds"] < 120
    assert [job["id"] for job in body["recent"]] == list(
        Job.objects.order_by("-id").values_list("pk", flat=True)[:20]
    )
    assert job_table_scans(queries) == []


def test_metrics_agree_with_the_table_and_label_estimates(settings, jobs):
    settings.CONVEYOR_METRICS_ALLOW = "127.0.0.1"
    with CaptureQueriesContext(connection) as queries:
        response = client().get("/metrics")
    text = response.content.decode()
    found = samples(text)
    for (queue, task, status), n in table_counts().items():
        labels = (("queue", queue), ("status", status), ("task", task))
        assert found[("conveyor_jobs", labels)] == n
    assert found[("conveyor_dead_letters", (("queue", "default"),))] == 3
    ended = (("queue", "default"), ("status", "succeeded"), ("task", "tests.record"))
    assert found[("conveyor_jobs_ended_last_hour", ended)] == 3
    # Run time 30 s for every ended job: not within 10 s, within 30 s.
    runtime = (("le", "10.0"), ("queue", "default"), ("task", "tests.permanent"))
    assert found[("conveyor_job_runtime_seconds_bucket", runtime)] == 0
    runtime = (("le", "30.0"), ("queue", "default"), ("task", "tests.permanent"))
    assert found[("conveyor_job_runtime_seconds_bucket", runtime)] == 3
    pair = (("queue", "default"), ("task", "tests.permanent"))
    assert found[("conveyor_job_runtime_seconds_sum", pair)] == pytest.approx(90, abs=1)
    # Wait from due to claim: 3 s.
    wait = (("le", "2.5"), ("queue", "default"), ("task", "tests.record"))
    assert found[("conveyor_job_wait_seconds_bucket", wait)] == 0
    wait = (("le", "5.0"), ("queue", "default"), ("task", "tests.record"))
    assert found[("conveyor_job_wait_seconds_bucket", wait)] == 3
    assert "an estimate" in text and "exact" in text
    assert job_table_scans(queries) == []


def test_the_dashboard_refresh_is_json_that_agrees_with_the_table(admin_user, jobs):
    with CaptureQueriesContext(connection) as queries:
        response = client(admin_user).get("/admin/dashboard/data.json")
    assert response.status_code == 200
    body = response.json()
    rows = {row["queue"]: row for row in body["queues"]}
    for queue in ("default", "other"):
        for status in (S.QUEUED, S.RUNNING, S.RETRYING):
            assert rows[queue][status] == Job.objects.filter(queue=queue, status=status).count()
    assert rows["default"]["dead_letters"] == 3
    assert {"deployments", "webhooks", "maintenance"} <= set(rows)
    assert set(body["parts"]) == {
        "dashboard-stamp",
        "dashboard-queues",
        "dashboard-tasks",
        "dashboard-chart",
        "dashboard-workers",
        "dashboard-deployers",
        "dashboard-deployments",
        "dashboard-approvals",
        "dashboard-maintenance",
        "dashboard-runtimes",
    }
    assert 'data-stat="queued"' in body["parts"]["dashboard-queues"]
    assert "5 succeeded, 3 failed" in body["parts"]["dashboard-chart"]
    assert 'data-task="tests.record"' in body["parts"]["dashboard-runtimes"]
    assert job_table_scans(queries) == []


def test_the_dashboard_refresh_needs_the_dashboard_permission(django_user_model):
    clerk = django_user_model.objects.create_user("clerk", password="x", is_staff=True)
    response = client(clerk).get("/admin/dashboard/data.json")
    assert response.status_code == 403
    assert set(response.json()["error"]) == {"code", "message", "details"}
    assert client().get("/admin/dashboard/data.json").status_code == 302  # to the login page


def result_count(page: str) -> str:
    """The count the changelist's paginator shows, e.g. "12 jobs" or "about 1,000 jobs"."""
    paginator = re.search(r'class="paginator".*?</(nav|p)>', page, re.DOTALL)[0]
    text = re.sub(r"<h2.*?</h2>|<ul>.*?</ul>|<[^>]+>", " ", paginator, flags=re.DOTALL)
    return re.search(r"((?:about |more than )?[\d,]+ jobs?)\b", text)[1]


@pytest.mark.parametrize(
    "query",
    ["", "?status__exact=queued", "?queue=other", "?task=tests.permanent&status__exact=dead"],
)
def test_the_changelist_counts_from_the_accounting(admin_user, jobs, query):
    with CaptureQueriesContext(connection) as queries:
        response = client(admin_user).get("/admin/jobs/job/" + query)
    assert response.status_code == 200
    filters = dict(pair.split("=") for pair in query.lstrip("?").split("&") if pair)
    expected = Job.objects.filter(
        **{k.removesuffix("__exact"): v for k, v in filters.items()}
    ).count()
    assert result_count(response.content.decode()) == f"{expected} jobs"
    assert job_table_scans(queries) == []
    # No date hierarchy (its month list sorts the table); the date range filters are links.
    assert 'class="toplinks"' not in response.content.decode()
    # The page reads neither the attempt histories (kilobytes a dead job) nor the results.
    page_reads = [q["sql"] for q in queries if q["sql"].startswith('SELECT "jobs_job"."id"')]
    assert page_reads and not any('"attempts_history"' in sql for sql in page_reads), page_reads
    assert not any('"jobs_job"."result"' in sql for sql in page_reads)


def test_no_viewer_can_ask_for_facet_counts_over_the_job_table(admin_user, jobs):
    # Django lets anyone who sees a list add ?_facets=1: a count per filter choice over
    # every matching row, on each page view (a full scan of jobs_job at any size).
    with CaptureQueriesContext(connection) as queries:
        response = client(admin_user).get("/admin/jobs/job/?_facets=1")
    assert response.status_code == 200
    assert job_table_scans(queries) == []
    assert result_count(response.content.decode()) == f"{Job.objects.count()} jobs"


def test_the_changelist_counts_other_filters_capped_then_estimates(admin_user, jobs, monkeypatch):
    Job.objects.filter(status=S.DEAD).update(reason="permanent")
    response = client(admin_user).get("/admin/jobs/job/?reason=permanent")
    assert result_count(response.content.decode()) == "3 jobs"
    monkeypatch.setattr(changelist, "EXACT_COUNT_CAP", 2)
    response = client(admin_user).get("/admin/jobs/job/?reason=permanent")
    assert re.fullmatch(r"about [\d,]+ jobs", result_count(response.content.decode()))


def test_the_changelist_filters_offer_declared_queues_and_registered_tasks(admin_user, jobs):
    page = client(admin_user).get("/admin/jobs/job/").content.decode()
    for queue in ("default", "deployments", "webhooks", "maintenance", "other"):
        assert f"?queue={queue}" in page
    for task in ("jobs.noop", "deployments.run", "tests.flaky"):
        assert f"task={task}" in page
