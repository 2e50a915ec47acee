"""The Jobs changelist's rows (jobs.changelist.page_rows): what they show and what they cost.

The rows are rendered in one pass, not by Django's ``result_list``: each cell must still be
what Django would render (times to the second aside), nothing may cost a query per row, and
the page falls back to Django where page_rows does not apply (a popup).
"""

import re
from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.admin.templatetags.admin_list import items_for_result
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from deployments.models import Pipeline, Project, Step
from deployments.services import deployment_create
from jobs import services
from jobs.changelist import page_rows, to_the_second
from jobs.models import Job, JobStatus
from webhooks import notify
from webhooks import services as webhooks

pytestmark = pytest.mark.django_db
URL = "/admin/jobs/job/"
CELL = re.compile(r"(?=<t[dh] class=)")


@pytest.fixture
def console(admin_user) -> Client:
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(admin_user)
    return client


@pytest.fixture
def make_jobs():
    """Add ``n`` jobs of every kind the list shows: plain (dead, with a reason and an error),
    a webhook delivery's and a deployment's (their owners are looked up for the page)."""
    webhooks.endpoint_create(url="https://93.184.215.14/hook", topics=["job.dead"], actor="t")
    project = Project.objects.create(slug="app", name="App")
    pipeline = Pipeline.objects.create(project=project, name="default")
    Step.objects.create(pipeline=pipeline, position=1, name="hello", command="echo hello")

    def make(n: int) -> None:
        for number in range(n):
            kind = number % 3
            if kind == 0:
                job = services.enqueue("tests.record", {"n": number}, priority=number % 5)
                Job.objects.filter(pk=job.pk).update(
                    status=JobStatus.DEAD, reason="exhausted", last_error="ValueError: boom"
                )
            elif kind == 1:
                notify("job.dead", {"job_id": number})
            else:
                deployment_create(project=project, ref="main", triggered_by="ci")

    return make


def page_queries(console) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = console.get(URL)
    assert response.status_code == 200
    return len(queries), response.content.decode()


def test_fifty_rows_cost_the_queries_five_rows_cost(console, make_jobs):
    make_jobs(5)
    five, page = page_queries(console)
    assert page.count('class="action-select"') == 5
    make_jobs(45)
    fifty, page = page_queries(console)
    assert page.count('class="action-select"') == 50
    assert "delivery " in page and "deployment " in page  # both owners were looked up
    assert fifty == five


def test_a_row_shows_what_an_operator_needs_escaped(console, admin_user):
    job = services.enqueue("tests.record", {}, priority=7, queue="other")
    finished = timezone.now() - timedelta(minutes=3)
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.DEAD,
        reason="exhausted",
        attempts=3,
        max_attempts=3,
        finished_at=finished,
        last_error="<script>alert(1)</script>" + "x" * 3000,
    )
    page = console.get(URL, {"status__exact": "dead"}).content.decode()
    (row,) = re.findall(r"<tr><td class=\"action-checkbox\">.*?</tr>", page)
    assert f'name="_selected_action" value="{job.pk}"' in row
    # The link keeps the filters, as Django's does.
    assert (
        f'<th class="field-id"><a href="/admin/jobs/job/{job.pk}/change/'
        f'?_changelist_filters=status__exact%3Ddead">{job.pk}</a></th>'
    ) in row
    assert '<b class="job-status dead has-reason" title="Attempts exhausted">Dead</b>' in row
    assert '<td class="field-attempts_display">3/3</td>' in row
    assert '<td class="field-queue">other</td>' in row
    assert f'<td class="field-finished_at nowrap">{to_the_second(finished)}</td>' in row
    assert '<td class="field-run_time">' in row
    assert "<script>" not in row and "&lt;script&gt;alert(1)&lt;/script&gt;" in row
    # One line: the cell holds the error's start (CSS cuts it with an ellipsis), its title
    # the error as far as a title is useful.
    error = r'<td class="field-short_error"><span class="clip" title="(.*?)">(.*?)<'
    (cell,) = re.findall(error, row)
    assert cell[0].startswith("&lt;script&gt;") and cell[0].count("x") == 2000 - 25
    assert cell[1].count("x") == 200 - 25


def test_each_cell_is_what_djangos_result_list_renders(admin_user, make_jobs):
    make_jobs(6)
    request = RequestFactory().get(URL, {"o": "-1"})
    request.user = admin_user
    model_admin = admin.site._registry[Job]
    cl = model_admin.get_changelist_instance(request)
    rows = page_rows(cl)
    assert rows is not None and len(rows) == len(cl.result_list) == 6
    dates = {"created_at", "finished_at"}
    compared = 0
    for row, job in zip(rows, cl.result_list, strict=True):
        ours = [cell for cell in CELL.split(row) if cell]
        django = list(items_for_result(cl, job, None))
        assert len(ours) == len(django) == len(cl.list_display)
        for name, mine, theirs in zip(cl.list_display, ours, django, strict=True):
            if name in dates:  # to the second, where Django shows minutes
                value = getattr(job, name)
                text = to_the_second(value) if value else model_admin.get_empty_value_display()
                assert mine == f'<td class="field-{name} nowrap">{text}</td>'
            else:
                assert mine == theirs, name
                compared += 1
    assert compared == 6 * (len(cl.list_display) - len(dates))


def test_a_popup_is_rendered_by_django_itself(console, make_jobs):
    make_jobs(3)
    page = console.get(URL, {"_popup": "1", "_to_field": "id"}).content.decode()
    assert page.count("data-popup-opener=") == 3
