"""/api/v1/queues: every declared queue's state; pause and resume (admin scope)."""

from jobs import services
from jobs.models import AuditLog
from tests.api.conftest import assert_error


def test_queues_lists_every_declared_queue_with_its_state_and_use(make_api):
    services.enqueue("jobs.noop", {})
    response = make_api("admin").get("/queues")
    assert response.status_code == 200, response.content
    queues = {queue["name"]: queue for queue in response.json()}
    assert {"default", "deployments", "webhooks", "maintenance"} <= set(queues)
    default = queues["default"]
    assert (default["paused"], default["queued"], default["running"]) == (False, 1, 0)
    assert default["concurrency_limit"] is None


def test_queues_and_the_queue_command_show_dead_letters_but_not_superseded_ones(make_api, capsys):
    from django.core.management import call_command
    from django.utils import timezone

    from jobs.models import Job, JobStatus

    jobs = services.enqueue_many("jobs.noop", [{}] * 3, queue="webhooks")
    now = timezone.now()
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(
        status=JobStatus.DEAD, started_at=now, finished_at=now
    )
    services.job_supersede([jobs[0].pk], actor="test")
    api = make_api("admin")
    listed = {q["name"]: q["dead_letters"] for q in api.get("/queues").json()}
    assert (listed["webhooks"], listed["default"]) == (2, 0)
    call_command("queue", "list")
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["webhooks"].endswith("dead_letters=2")
    assert lines["default"].endswith("dead_letters=0")


def test_pause_and_resume_answer_the_queue_and_are_audited(make_api):
    api = make_api("admin")
    paused = api.post("/queues/webhooks/pause")
    assert paused.status_code == 200, paused.content
    assert (paused.json()["name"], paused.json()["paused"]) == ("webhooks", True)
    assert paused.json()["paused_by"] == "token:admin-token"
    listed = {q["name"]: q["paused"] for q in api.get("/queues").json()}
    assert listed["webhooks"] is True and listed["default"] is False
    assert api.get("/queue").json()["paused_queues"] == ["webhooks"]
    resumed = api.post("/queues/webhooks/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    actions = AuditLog.objects.filter(target_type="queue", target_id="webhooks")
    assert sorted(actions.values_list("action", flat=True)) == ["queue.pause", "queue.resume"]


def test_an_undeclared_queue_is_404_in_the_error_shape(make_api):
    api = make_api("admin")
    assert_error(api.post("/queues/nope/pause"), 404, "not_found")
    assert_error(api.post("/queues/nope/resume"), 404, "not_found")


def test_queues_need_the_admin_scope(make_api):
    for scope in ("read", "deploy"):
        api = make_api(scope)
        assert_error(api.get("/queues"), 403, "forbidden")
        assert_error(api.post("/queues/default/pause"), 403, "forbidden")
        assert_error(api.post("/queues/default/resume"), 403, "forbidden")
    assert not AuditLog.objects.filter(target_type="queue").exists()
