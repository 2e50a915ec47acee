"""The console's workflow page: permissions, the graph and the jobs list's workflow filter."""

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from jobs import completer, outcome, services, workflows
from jobs.models import Job, JobStatus
from tests.workflows.conftest import enqueue

pytestmark = pytest.mark.django_db(transaction=True)
S = JobStatus


def _client(*codenames: str) -> Client:
    user = User.objects.create_user(f"staff{User.objects.count()}", password="x", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


def _diamond():
    graph = workflows.graph(name="diamond <b>")
    graph.add(("tests.wf.add", {"n": 1}), key="top")
    graph.add(("tests.wf.add", {"n": 2}), key="left", depends_on=["top"])
    graph.add(("tests.wf.add", {"n": 3}), key="right", depends_on=["top"])
    graph.add("tests.wf.collect", key="join", depends_on=["left", "right"])
    flow = enqueue(graph)
    top = Job.objects.filter(workflow=flow).order_by("id").first()
    claimed = services.job_claim(top.pk, worker="hand/1")
    completer.finish(outcome.Decision(S.SUCCEEDED, result="1"), claimed)
    return flow


def test_the_workflow_page_draws_every_job_and_needs_view_job():
    flow = _diamond()
    url = f"/admin/jobs/workflow/{flow.pk}/change/"
    assert _client().get(url).status_code == 403
    response = _client("view_job").get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert "diamond &lt;b&gt;" in html and "diamond <b>" not in html
    assert html.count("<rect") == 4 and html.count("<line") == 4
    assert 'id="workflow-status">running<' in html
    assert 'id="workflow-cancel"' not in html  # no jobs.cancel_job
    jobs = _client("view_job").get(f"/admin/jobs/job/?workflow={flow.pk}")
    assert jobs.status_code == 200
    assert len(jobs.context["cl"].result_list) == 4
    assert _client("view_job").get("/admin/jobs/job/?workflow=abc").status_code in (200, 302)


def test_cancel_from_the_console_needs_cancel_job():
    flow = _diamond()
    url = f"/admin/jobs/workflow/{flow.pk}/cancel/"
    assert _client("view_job").post(url).status_code == 403
    client = _client("view_job", "cancel_job")
    assert (
        'id="workflow-cancel"'
        in client.get(f"/admin/jobs/workflow/{flow.pk}/change/").content.decode()
    )
    assert client.post(url).status_code == 302
    statuses = set(Job.objects.filter(workflow=flow).values_list("status", flat=True))
    assert statuses == {S.SUCCEEDED, S.CANCELLED}
    assert client.get("/admin/jobs/workflow/999999/change/").status_code == 404


def test_a_workflow_is_deleted_only_after_its_jobs():
    """Its waiting jobs would wait for good: the console offers no delete, and the ORM's is
    refused while any of its jobs is left, as the purge's."""
    from django.db.models import ProtectedError

    from jobs.models import Workflow

    flow = _diamond()
    url = f"/admin/jobs/workflow/{flow.pk}/delete/"
    assert _client("view_job", "delete_workflow").post(url, {"post": "yes"}).status_code == 403
    with pytest.raises(ProtectedError, match="cancel it"):
        Workflow.objects.filter(pk=flow.pk).delete()
    assert Job.objects.filter(workflow=flow).count() == 4
    workflows.workflow_cancel(flow.pk, actor="test")
    with pytest.raises(ProtectedError, match="delete them first"):
        Workflow.objects.filter(pk=flow.pk).delete()
    assert not Job.objects.filter(status=S.WAITING).exists()
    Job.objects.filter(workflow=flow).delete()
    Workflow.objects.filter(pk=flow.pk).delete()
    assert not Workflow.objects.filter(pk=flow.pk).exists()


def test_a_job_of_a_workflow_that_has_not_ended_is_protected_from_the_consoles_delete():
    """Deleting a node would leave its dependants waiting for good, or running without its
    outcome: the delete page and "Delete selected" show it as protected and delete nothing
    until the workflow is cancelled."""
    flow = _diamond()
    left = Job.objects.filter(workflow=flow, status=S.QUEUED).order_by("id").first()
    client = _client("view_job", "delete_job")
    page = client.post(f"/admin/jobs/job/{left.pk}/delete/", {"post": "yes"})
    assert page.status_code == 200 and "has not ended (cancel it first)" in page.content.decode()
    selected = client.post(
        "/admin/jobs/job/",
        {"action": "delete_selected", "_selected_action": [left.pk], "post": "yes"},
    )
    assert "has not ended (cancel it first)" in selected.content.decode()
    assert Job.objects.filter(workflow=flow).count() == 4
    workflows.workflow_cancel(flow.pk, actor="test")
    assert client.post(f"/admin/jobs/job/{left.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Job.objects.filter(pk=left.pk).exists()


def test_a_second_cancel_and_a_workflow_whose_jobs_were_purged_answer_pages_not_errors():
    flow = _diamond()
    client = _client("view_job", "cancel_job")
    url = f"/admin/jobs/workflow/{flow.pk}/cancel/"
    assert client.post(url).status_code == 302
    again = client.post(url, follow=True)  # a double click: nothing left to cancel
    assert again.status_code == 200 and "nothing left to cancel" in again.content.decode()

    Job.objects.filter(workflow=flow).delete()  # as the purge would, one status at a time
    page = client.get(f"/admin/jobs/workflow/{flow.pk}/change/")
    assert page.status_code == 200 and 'class="workflow-graph"' in page.content.decode()


def test_the_workflows_list_tells_running_from_ended():
    """A workflow that never ends keeps its jobs from the purge: the list finds them."""
    running = _diamond()
    ended = enqueue(workflows.chain("tests.wf.add"))
    only = Job.objects.get(workflow=ended)
    completer.finish(
        outcome.Decision(S.SUCCEEDED, result="1"), services.job_claim(only.pk, worker="hand/1")
    )
    client = _client("view_job")
    shown = {
        state: [
            row.pk
            for row in client.get(f"/admin/jobs/workflow/?state={state}").context["cl"].result_list
        ]
        for state in ("running", "ended")
    }
    assert shown == {"running": [running.pk], "ended": [ended.pk]}
    page = client.get("/admin/jobs/workflow/")
    assert page.status_code == 200
    rows = {row.pk: row.is_running for row in page.context["cl"].result_list}
    assert rows == {running.pk: True, ended.pk: False}
    assert 'alt="True"' in page.content.decode() and 'alt="False"' in page.content.decode()
    assert _client().get("/admin/jobs/workflow/?state=running").status_code == 403
