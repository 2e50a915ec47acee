"""GET /api/v1/workflows/{id} and its cancel: scope, the person's permission, the error shape."""

import pytest
from django.contrib.auth.models import Permission, User

from jobs import services, workflows
from jobs.models import Job, JobStatus
from project.access.tokens import token_create
from tests.api.conftest import Api, assert_error
from tests.workflows.conftest import enqueue

pytestmark = pytest.mark.django_db(transaction=True)


def _api(scope: str, user=None) -> Api:
    _, raw = token_create(name=f"{scope}-wf", scope=scope, user=user)
    return Api(raw)


def _person(*codenames: str) -> User:
    user = User.objects.create_user(f"person{User.objects.count()}", password="x")
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


def test_a_workflow_reads_with_its_nodes_and_what_each_waits_for():
    flow = enqueue(workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"), name="c")
    first, second, callback = Job.objects.filter(workflow=flow).order_by("id")
    response = _api("admin").get(f"/workflows/{flow.pk}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["id"], body["name"], body["status"]) == (flow.pk, "c", "running")
    assert body["counts"] == {"queued": 2, "waiting": 1}
    assert [(n["job_id"], n["task"], n["status"], n["depends_on"]) for n in body["nodes"]] == [
        (first.pk, "tests.wf.add", "queued", []),
        (second.pk, "tests.wf.add", "queued", []),
        (callback.pk, "tests.wf.collect", "waiting", [first.pk, second.pk]),
    ]
    page = _api("admin").get(f"/workflows/{flow.pk}", limit=2).json()
    assert len(page["nodes"]) == 2 and page["next_after"] == second.pk
    rest = _api("admin").get(f"/workflows/{flow.pk}", after=second.pk).json()
    assert [n["job_id"] for n in rest["nodes"]] == [callback.pk] and rest["next_after"] is None
    # a node's own page names its workflow; a job on its own names none
    assert _api("admin").get(f"/jobs/{callback.pk}").json()["workflow"] == flow.pk
    alone = services.enqueue("tests.wf.add", {})
    assert _api("admin").get(f"/jobs/{alone.pk}").json()["workflow"] is None


def test_a_person_needs_view_job_and_an_unknown_workflow_is_a_404():
    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add"))
    assert_error(_api("read").get(f"/workflows/{flow.pk}"), 403, "forbidden")  # a project's
    assert_error(_api("admin", _person()).get(f"/workflows/{flow.pk}"), 403, "forbidden")
    assert _api("admin", _person("view_job")).get(f"/workflows/{flow.pk}").status_code == 200
    assert_error(_api("admin").get("/workflows/999999"), 404, "not_found")
    assert_error(_api("admin").get("/workflows/nope"), 404)
    assert_error(_api("admin").get(f"/workflows/{flow.pk}", limit=0), 422)


def test_cancel_needs_admin_scope_and_cancel_job():
    flow = enqueue(workflows.chain("tests.wf.add", "tests.wf.add"))
    assert_error(_api("deploy").post(f"/workflows/{flow.pk}/cancel"), 403, "forbidden")
    person = _person("view_job")
    assert_error(_api("admin", person).post(f"/workflows/{flow.pk}/cancel"), 403, "forbidden")
    response = _api("admin").post(f"/workflows/{flow.pk}/cancel")
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "cancelled"
    assert set(Job.objects.filter(workflow=flow).values_list("status", flat=True)) == {
        JobStatus.CANCELLED
    }
    assert_error(_api("admin").post("/workflows/999999/cancel"), 404, "not_found")
    # every job has ended now: nothing to cancel, and its status stays what its jobs say
    assert_error(_api("admin").post(f"/workflows/{flow.pk}/cancel"), 409, "conflict")


def test_a_workflow_a_deployment_started_shows_on_its_timeline(make_project):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from deployments.services import deployment_create
    from deployments.timeline import deployment_timeline
    from tests.workflows.test_operate import _die, _succeed

    deployment = deployment_create(project=make_project(), ref="main")
    flow = enqueue(
        workflows.chord(["tests.wf.add", "tests.wf.add"], "tests.wf.collect"),
        name="smoke",
        started_by=deployment,
    )
    other = enqueue(workflows.chain("tests.wf.add"), started_by="deployment:999999")
    token = _api("admin")

    def kinds() -> list[tuple]:
        events = token.get(f"/deployments/{deployment.pk}/timeline").json()["events"]
        found = [e for e in events if e["kind"].startswith("workflow_")]
        return [(e["kind"], e["workflow_id"], e.get("status")) for e in found]

    assert kinds() == [("workflow_started", flow.pk, None)]
    first, second, callback = Job.objects.filter(workflow=flow).order_by("id")
    _succeed(first)
    _die(second)
    assert kinds() == [("workflow_started", flow.pk, None)]  # the callback still runs
    _succeed(Job.objects.get(pk=callback.pk))
    assert kinds() == [("workflow_started", flow.pk, None), ("workflow_ended", flow.pk, "failed")]
    body = _api("admin").get(f"/workflows/{flow.pk}").json()
    assert body["started_by"] == f"deployment:{deployment.pk}"

    # The timeline reads all of a deployment's workflows with the same few queries.
    def timeline_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            deployment_timeline(deployment)
        return len(queries.captured_queries)

    one = timeline_queries()
    for _ in range(4):
        enqueue(workflows.chain("tests.wf.add"), started_by=deployment)
    assert timeline_queries() == one
    assert len([e for e in deployment_timeline(deployment) if e["kind"] == "workflow_started"]) == 5
    assert _api("admin").get(f"/workflows/{other.pk}").json()["started_by"] == "deployment:999999"


@pytest.mark.parametrize(
    "origin", ["deployment", "Deployment:1", "deployment:x", "deployment:012", 12, "a" * 60 + ":1"]
)
def test_a_started_by_that_is_not_kind_and_id_is_refused(origin):
    with pytest.raises(workflows.WorkflowError, match="started_by"):
        workflows.chain("tests.wf.add").enqueue(started_by=origin)
    assert not Job.objects.exists()
