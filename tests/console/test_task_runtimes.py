"""The Tasks pages (project.task_runtimes): figures from the rollup that agree with jobs_job.

Jobs with known run and wait times end on both sides of the one-hour cutoff; the pages'
counts and maxima must equal what the table says, and each p50/p95 (a bucket estimate) must
fall in the bucket holding the table's true percentile. No query of the pages aggregates
over jobs_job. django.tasks jobs, run by a real worker, count under their function path.
"""

import math
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs import services, task_names
from jobs.accounting import counts, rollup, triggers
from jobs.accounting.stats import quantile
from jobs.models import Job, JobStatus
from tests import djangotasks
from tests.api.conftest import make_api  # noqa: F401 - fixture
from tests.console.test_accounting_reads import job_table_scans
from tests.console.test_console import client, samples
from tests.jobs.accounting_scenario import table_counts
from tests.processes import wait_until

S = JobStatus
BOUNDS = rollup.RUN_TIME_BOUNDS
# Run times of the succeeded tests.record jobs of the last hour (seconds).
RUN_TIMES = [0.003] * 5 + [0.2] * 10 + [4.0] * 4 + [40.0]


def _finish(ids, *, status, ended, run: float, wait: float) -> None:
    started = ended - timedelta(seconds=run)
    Job.objects.filter(pk__in=ids).update(
        status=status,
        run_after=started - timedelta(seconds=wait),
        started_at=started,
        finished_at=ended,
    )


@pytest.fixture
def ended(transactional_db):
    """Jobs that ended a minute ago and two hours ago, rolled up as the runner would."""
    now = timezone.now()
    recent = now - timedelta(minutes=1)
    long_ago = now - timedelta(hours=2)
    records = services.enqueue_many("tests.record", [{}] * (len(RUN_TIMES) + 3))
    for job, run in zip(records, RUN_TIMES, strict=False):
        _finish([job.pk], status=S.SUCCEEDED, ended=recent, run=run, wait=2.0)
    old = [job.pk for job in records[len(RUN_TIMES) :]]
    _finish(old, status=S.SUCCEEDED, ended=long_ago, run=600.0, wait=30.0)
    dead = services.enqueue_many("tests.permanent", [{}] * 2, queue="other")
    _finish([job.pk for job in dead], status=S.DEAD, ended=recent, run=1.0, wait=0.5)
    function = Job.objects.get(pk=int(djangotasks.add.enqueue(1, 2).id))  # a django.tasks job
    _finish([function.pk], status=S.SUCCEEDED, ended=recent, run=0.05, wait=0.1)
    rollup.refresh(now=long_ago + timedelta(seconds=30))  # the old minute first: a refresh
    rollup.refresh(now=now)  # replaces every minute from its first on
    return now


def superuser():
    return get_user_model().objects.create_superuser("boss", "boss@example.com", "pw")


def true_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def bucket_of(seconds: float) -> tuple[float, float]:
    lower = 0.0
    for upper in BOUNDS:
        if seconds <= upper:
            return lower, upper
        lower = upper
    return lower, math.inf


def table_figures(task: str, since) -> dict:
    """What jobs_job says about ``task``'s jobs that ended since ``since``."""
    jobs = Job.objects.filter(finished_at__gte=since.replace(second=0, microsecond=0))
    if task == "tests.djangotasks.add":
        jobs = jobs.filter(task="jobs.django_task", payload__path=task)
    else:
        jobs = jobs.filter(task=task)
    rows = list(jobs.values_list("status", "run_after", "started_at", "finished_at"))
    runs = [(f - s).total_seconds() for _, _, s, f in rows]
    waits = [(s - r).total_seconds() for _, r, s, _ in rows]
    return {
        "executions": len(rows),
        "failed": sum(1 for status, *_ in rows if status == S.DEAD),
        "runs": runs,
        "waits": waits,
    }


def assert_agrees(row: dict, table: dict) -> None:
    assert row["executions"] == table["executions"]
    assert row["failed"] == table["failed"]
    assert row["failure_rate"] == pytest.approx(table["failed"] / table["executions"])
    assert row["run_max"] == pytest.approx(max(table["runs"]), abs=1e-3)
    assert row["wait_max"] == pytest.approx(max(table["waits"]), abs=1e-3)
    for key, values in (("run", table["runs"]), ("wait", table["waits"])):
        for q in (0.5, 0.95):
            lower, upper = bucket_of(true_quantile(values, q))
            estimate = row[f"{key}_p{round(q * 100)}"]
            assert lower - 1e-9 <= estimate <= upper + 1e-9, (key, q, estimate, lower, upper)


def rows_by_task(response) -> dict[str, dict]:
    return {row["task"]: row for row in response.context["rows"]}


def test_the_tasks_page_agrees_with_the_table_without_scanning_it(ended):
    browser = client(superuser())
    with CaptureQueriesContext(connection) as queries:
        response = browser.get("/admin/tasks/")
    assert response.status_code == 200
    assert job_table_scans(queries) == []
    rows = rows_by_task(response)
    assert set(rows) == {"tests.record", "tests.permanent", "tests.djangotasks.add"}
    hour_ago = ended - timedelta(hours=1)
    for task, row in rows.items():
        assert_agrees(row, table_figures(task, hour_ago))
    assert rows["tests.record"]["executions"] == len(RUN_TIMES)  # not the two-hour-old ones
    assert rows["tests.record"]["run_max"] == pytest.approx(40.0, abs=1e-3)
    assert rows["tests.permanent"]["failure_rate"] == 1.0
    body = response.content.decode()
    assert "estimates from the rollup" in body
    assert 'href="/admin/tasks/tests.djangotasks.add/?window=1h"' in body

    day = rows_by_task(browser.get("/admin/tasks/?window=24h"))
    for task, row in day.items():
        assert_agrees(row, table_figures(task, ended - timedelta(hours=24)))
    assert day["tests.record"]["executions"] == len(RUN_TIMES) + 3
    assert day["tests.record"]["run_max"] == pytest.approx(600.0, abs=1e-3)


def test_the_tasks_page_narrows_to_one_queue(ended):
    browser = client(superuser())
    response = browser.get("/admin/tasks/?queue=other")
    assert response.context["queues"] == ["default", "other"]
    rows = rows_by_task(response)
    assert set(rows) == {"tests.permanent"}
    assert rows["tests.permanent"]["jobs_url"].endswith("task=tests.permanent&queue=other")
    assert set(rows_by_task(browser.get("/admin/tasks/?queue=default"))) == {
        "tests.record",
        "tests.djangotasks.add",
    }


def test_a_task_page_shows_its_figures_per_queue_and_its_charts(ended):
    browser = client(superuser())
    with CaptureQueriesContext(connection) as queries:
        response = browser.get("/admin/tasks/tests.record/?window=24h")
    assert response.status_code == 200
    assert job_table_scans(queries) == []
    detail = response.context["detail"]
    assert_agrees(detail["total"], table_figures("tests.record", ended - timedelta(hours=24)))
    assert [q["queue"] for q in detail["queues"]] == ["default"]
    assert len(detail["points"]) == 24
    assert sum(p["executions"] for p in detail["points"]) == len(RUN_TIMES) + 3
    hour = [p for p in detail["points"] if p["executions"] == 3]
    assert len(hour) == 1 and hour[0]["run_max"] == pytest.approx(600.0, abs=1e-3)
    body = response.content.decode()
    for chart in ("task-executions-chart", "task-run-chart", "task-wait-chart"):
        assert f'id="{chart}"><div class="console-chart"' in body
    assert body.count("data-point=") == 2 * 2 * 2  # p50 and p95, run and wait, two hours
    assert "/admin/jobs/job/?task=tests.record" in body

    minutes = browser.get("/admin/tasks/tests.record/").context["detail"]
    assert len(minutes["points"]) == 60
    assert sum(p["executions"] for p in minutes["points"]) == len(RUN_TIMES)


def test_the_dashboard_names_the_busiest_and_slowest_tasks(ended):
    response = client(superuser()).get("/admin/dashboard/")
    runtimes = response.context["runtimes"]
    assert [r["task"] for r in runtimes["busiest"]][:1] == ["tests.record"]
    assert [r["task"] for r in runtimes["slowest"]][:1] == ["tests.record"]  # p95 ≈ 4 s
    assert 'href="/admin/tasks/"' in response.content.decode()


def test_the_tasks_pages_need_the_dashboards_permission(ended):
    users = get_user_model().objects
    staff = users.create_user("staff", password="pw", is_staff=True)
    for url in ("/admin/tasks/", "/admin/tasks/tests.record/"):
        assert client().get(url).status_code == 302  # to the login page
        assert client(staff).get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_job"))
    staff = users.get(pk=staff.pk)
    assert client(staff).get("/admin/tasks/").status_code == 200
    index = client(staff).get("/admin/").content.decode()
    assert 'href="/admin/tasks/"' in index


def test_the_accounting_counts_django_tasks_jobs_by_their_function(transactional_db):
    first, second = djangotasks.add.enqueue(1, 2), djangotasks.add.enqueue(3, 4)
    djangotasks.fails.enqueue("later")
    services.enqueue("tests.record", {})
    Job.objects.filter(pk=int(first.id)).update(status=S.RUNNING)
    Job.objects.filter(pk=int(second.id)).delete()
    found = {key: n for key, n in counts.read().items() if n}
    assert found == table_counts()
    assert found == {
        ("default", "tests.djangotasks.add", S.RUNNING): 1,
        ("default", "tests.djangotasks.fails", S.QUEUED): 1,
        ("default", "tests.record", S.QUEUED): 1,
    }
    counts.fold()
    assert {key: n for key, n in counts.read().items() if n} == found
    triggers.install()  # the rebuild from the table agrees
    assert {key: n for key, n in counts.read().items() if n} == found
    browser = client(superuser())
    listed = browser.get("/admin/jobs/job/?task=jobs.django_task").content.decode()
    assert "2 jobs" in listed  # counted from the table, not from the accounting
    listed = browser.get("/admin/jobs/job/?task=tests.djangotasks.fails").content.decode()
    assert "1 job" in listed
    offered = browser.get("/admin/jobs/job/").content.decode()
    assert "?task=tests.djangotasks.fails" in offered and "?task=tests.djangotasks.add" in offered


def test_the_task_filter_tells_a_stored_task_from_a_function_path(transactional_db):
    function = Job.objects.get(pk=int(djangotasks.add.enqueue(1, 2).id))
    stale = services.enqueue("tests.record", {})
    Job.objects.filter(pk=stale.pk).update(task="retired.celery.task")  # no longer registered
    services.enqueue("tests.record", {"path": "tests.djangotasks.add"})  # a look-alike payload
    for name, expected in (
        ("tests.djangotasks.add", [function.pk]),
        ("retired.celery.task", [stale.pk]),
        ("jobs.django_task", [function.pk]),
        ("never.heard.of", []),
    ):
        found = Job.objects.filter(task_names.filter_by_name(name)).values_list("pk", flat=True)
        assert sorted(found) == expected, name


def test_a_django_task_run_by_a_worker_is_listed_and_counted_by_its_function(
    transactional_db,
    start_worker,
    settings,
    make_api,  # noqa: F811
):
    start_worker(queues="default", concurrency=1)
    good = djangotasks.add.enqueue(2, 3)
    bad = djangotasks.fails.enqueue("no")
    for result in (good, bad):
        wait_until(lambda r=result: r.refresh() or r.is_finished, timeout=60, message="a task")
    assert good.return_value == 5 and bad.status == "FAILED"
    assert set(Job.objects.values_list("task", flat=True)) == {"jobs.django_task"}
    rollup.refresh()
    browser = client(superuser())
    rows = rows_by_task(browser.get("/admin/tasks/"))
    assert rows["tests.djangotasks.add"]["executions"] == 1
    assert rows["tests.djangotasks.fails"]["failed"] == 1
    assert "jobs.django_task" not in rows

    listed = browser.get("/admin/jobs/job/?task=tests.djangotasks.add").content.decode()
    assert "?task=tests.djangotasks.add" in listed
    assert listed.count('class="field-task_name"') == 1
    clip = '<td class="field-task_name"><span class="clip" title="{0}">{0}</span></td>'
    assert clip.format("tests.djangotasks.add") in listed
    assert "tests.djangotasks.fails</span>" not in listed
    everything = browser.get("/admin/jobs/job/").content.decode()
    assert clip.format("tests.djangotasks.fails") in everything
    assert "1 job" in listed
    job = Job.objects.get(pk=int(good.id))
    page = browser.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "tests.djangotasks.add (a django.tasks function, run by jobs.django_task)" in page
    found = make_api("admin").get("/jobs?task=tests.djangotasks.add").json()
    assert [item["id"] for item in found] == [job.pk]
    assert len(make_api("admin").get("/jobs?task=jobs.django_task").json()) == 2

    settings.CONVEYOR_METRICS_ALLOW = "127.0.0.1"
    ended_by_task = {
        dict(labels)["task"]: value
        for (name, labels), value in samples(client().get("/metrics").content.decode()).items()
        if name == "conveyor_jobs_ended_last_hour"
    }
    assert ended_by_task == {"tests.djangotasks.add": 1, "tests.djangotasks.fails": 1}
    timed = {  # the exact histograms (jobs.accounting.tallies): per function too
        dict(labels)["task"]: value
        for (name, labels), value in samples(client().get("/metrics").content.decode()).items()
        if name == "conveyor_job_runtime_seconds_count"
    }
    assert timed == {"tests.djangotasks.add": 1, "tests.djangotasks.fails": 1}


@pytest.mark.parametrize(
    ("buckets", "q", "most", "expected"),
    [
        ([0] * 17, 0.5, 0.0, None),  # nothing ran
        # 10 jobs: 4 at most 5 ms, 6 in (5 ms, 10 ms]: the median's rank 5 is 1/6 into the
        # second bucket.
        ([4] + [10] * 16, 0.5, 0.009, 0.005 + 0.005 * (5 - 4) / 6),
        ([4] + [10] * 16, 0.95, 0.009, 0.009),  # capped at the largest value seen
        ([0] * 16 + [3], 0.5, 5000.0, 5000.0),  # beyond the last bound: the largest value
    ],
)
def test_quantiles_interpolate_inside_the_bucket_and_never_exceed_the_max(
    buckets, q, most, expected
):
    found = quantile(buckets, BOUNDS, q, most)
    assert found == (None if expected is None else pytest.approx(expected))
