"""/api/v1/tasks: limited and paused job tasks, their limits in use; pause and resume."""

from jobs import services
from jobs.models import AuditLog
from tests.api.conftest import assert_error


def test_tasks_lists_the_limited_tasks_with_their_limits_and_use(make_api):
    job = services.enqueue("tests.limited", {"key": "k", "tenant": "a"})
    services.job_claim(job.pk, worker="w/1")
    response = make_api("admin").get("/tasks")
    assert response.status_code == 200, response.content
    tasks = {task["name"]: task for task in response.json()}
    assert {"tests.limited", "tests.rated", "tests.fair", "webhooks.deliver"} <= set(tasks)
    limited = tasks["tests.limited"]
    assert limited["limit"] == {
        "concurrency": 2,
        "key": ["tenant"],
        "key_concurrency": 1,
        "rate": None,
        "key_rate": None,
        "fair": False,
    }
    assert (limited["running"], limited["paused"]) == (1, False)
    assert limited["busiest_keys"] == [{"key": '"a"', "running": 1}]
    assert tasks["webhooks.deliver"]["limit"]["key"] == ["endpoint_id"]


def test_pausing_a_task_answers_it_lists_it_and_is_audited(make_api):
    api = make_api("admin")
    paused = api.post("/tasks/jobs.noop/pause")
    assert paused.status_code == 200, paused.content
    assert (paused.json()["name"], paused.json()["paused"]) == ("jobs.noop", True)
    assert paused.json()["paused_by"] == "token:admin-token"
    assert "jobs.noop" in {task["name"] for task in api.get("/tasks").json()}
    assert api.get("/queue").json()["paused_tasks"] == ["jobs.noop"]
    resumed = api.post("/tasks/jobs.noop/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    actions = AuditLog.objects.filter(target_type="task", target_id="jobs.noop")
    assert sorted(actions.values_list("action", flat=True)) == ["task.pause", "task.resume"]


def test_an_unknown_task_is_404_in_the_error_shape(make_api):
    api = make_api("admin")
    assert_error(api.post("/tasks/nope/pause"), 404, "not_found")
    assert_error(api.post("/tasks/os.system/resume"), 404, "not_found")


def test_tasks_need_the_admin_scope(make_api):
    for scope in ("read", "deploy"):
        api = make_api(scope)
        assert_error(api.get("/tasks"), 403, "forbidden")
        assert_error(api.post("/tasks/jobs.noop/pause"), 403, "forbidden")
        assert_error(api.post("/tasks/jobs.noop/resume"), 403, "forbidden")
    assert not AuditLog.objects.filter(target_type="task").exists()
