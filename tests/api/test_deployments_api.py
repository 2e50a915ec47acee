"""The deployments API as CI uses it: scopes, triggers, idempotency, conflicts, logs."""

import json
import threading
import time

import pytest
from django.db import connection

from deployments.models import Deployment, DeploymentStatus, Project
from project.access.models import IdempotencyKey
from tests.api.conftest import Api, assert_error
from tests.deployments.conftest import wait_for

pytestmark = pytest.mark.usefixtures("purge_broker")
TRIGGER = {"ref": "main", "environment": "staging"}


def test_scopes_and_project_binding(make_project, project_api, make_api):
    app, other = make_project("app"), make_project("other")
    reader, deployer, stranger = (
        project_api("read", app),
        project_api("deploy", app),
        project_api("deploy", other),
    )
    created = deployer.post("/projects/app/deployments", TRIGGER)
    assert created.status_code == 201, created.content
    dep_id = created.json()["id"]
    assert reader.get("/projects/app/deployments").status_code == 200
    assert reader.get(f"/deployments/{dep_id}").status_code == 200
    assert reader.get(f"/deployments/{dep_id}/logs").status_code == 200
    assert_error(reader.post("/projects/app/deployments", TRIGGER), 403, "forbidden")
    assert_error(reader.post(f"/deployments/{dep_id}/cancel"), 403, "forbidden")
    # A token bound to another project cannot tell this one exists.
    assert_error(stranger.get("/projects/app/deployments"), 404, "not_found")
    assert_error(stranger.get(f"/deployments/{dep_id}"), 404, "not_found")
    assert_error(stranger.post("/projects/app/deployments", TRIGGER), 404, "not_found")
    assert_error(stranger.get("/projects/nope/deployments"), 404, "not_found")
    assert make_api("admin").get(f"/deployments/{dep_id}").status_code == 200
    assert_error(deployer.get("/jobs"), 403)


def test_trigger_returns_the_contract_fields_and_a_location(make_project, project_api):
    make_project("app")
    api = project_api("deploy", *Project.objects.all())
    response = api.post("/projects/app/deployments", {**TRIGGER, "params": {"VERSION": "1.2"}})
    assert response.status_code == 201
    body = response.json()
    for field in (
        "id",
        "project",
        "environment",
        "ref",
        "commit_sha",
        "status",
        "failure_reason",
        "retry_of",
        "attempt",
        "created_at",
        "started_at",
        "finished_at",
    ):
        assert field in body, field
    assert (body["project"], body["environment"], body["ref"], body["status"]) == (
        "app",
        "staging",
        "main",
        "pending",
    )
    assert (body["attempt"], body["retry_of"], body["params"]) == (1, None, {"VERSION": "1.2"})
    assert response["Location"] == f"/api/v1/deployments/{body['id']}"
    assert api.get(f"/deployments/{body['id']}").json()["id"] == body["id"]


def test_bad_triggers_are_refused_and_write_nothing(make_project, project_api):
    api = project_api("deploy", make_project("app"))
    assert_error(api.post("/projects/app/deployments", {"environment": "x"}), 422, "invalid")
    error = assert_error(
        api.post("/projects/app/deployments", {**TRIGGER, "colour": "red"}), 422, "invalid"
    )
    assert "colour" in json.dumps(error["details"])
    assert_error(api.post("/projects/app/deployments", raw=b'{"ref": "main",'), 400, "bad_request")
    assert_error(api.post("/projects/app/deployments", raw=b"[1, 2]"), 422)
    assert_error(api.post("/projects/app/deployments", {**TRIGGER, "pipeline": "nope"}), 422)
    assert_error(api.post("/projects/app/deployments", {"ref": ""}), 422)
    assert_error(
        api.post("/projects/app/deployments", {"ref": "main", "params": {"a": {"b": 1}}}), 422
    )
    too_big = json.dumps({**TRIGGER, "params": {"x": "y" * (2 * 1024 * 1024)}}).encode()
    assert_error(api.post("/projects/app/deployments", raw=too_big), 413, "payload_too_large")
    assert_error(
        api.post("/projects/app/deployments", raw=b'{"ref": "main", "params": {"x": NaN}}'), 422
    )
    assert_error(api.post("/projects/app/deployments", {"ref": "ma\u0000in"}), 422)
    assert_error(api.post("/projects/app/deployments", {"ref": "main", "pipeline": "a\u0000"}), 422)
    assert_error(api.get("/projects/app/deployments", environment="\x00"), 422)
    assert_error(api.get("/projects/%00/deployments"), 422)
    assert Deployment.objects.count() == 0


def test_idempotency_key_replays_refuses_other_bodies_and_in_flight(make_project, project_api):
    api = project_api("deploy", make_project("app"))
    key = {"Idempotency-Key": "ci-run-77"}
    first = api.post("/projects/app/deployments", TRIGGER, headers=key)
    again = api.post("/projects/app/deployments", TRIGGER, headers=key)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    other = api.post("/projects/app/deployments", {**TRIGGER, "ref": "v2"}, headers=key)
    assert_error(other, 422, "idempotency_conflict")
    record = IdempotencyKey.objects.get(key="ci-run-77")
    IdempotencyKey.objects.create(
        token=record.token, key="in-flight", path=record.path, fingerprint=record.fingerprint
    )  # a request still running
    assert_error(
        api.post("/projects/app/deployments", TRIGGER, headers={"Idempotency-Key": "in-flight"}),
        409,
    )
    assert_error(
        api.post("/projects/app/deployments", TRIGGER, headers={"Idempotency-Key": "k" * 300}), 400
    )
    assert Deployment.objects.count() == 1


def test_idempotency_keys_belong_to_their_token_not_to_the_project(make_project, project_api):
    project = make_project("app")
    first_ci, second_ci = project_api("deploy", project), project_api("deploy", project)
    key = {"Idempotency-Key": "build-1"}
    mine = first_ci.post("/projects/app/deployments", TRIGGER, headers=key)
    theirs = second_ci.post("/projects/app/deployments", TRIGGER, headers=key)
    other_body = second_ci.post(
        "/projects/app/deployments", {**TRIGGER, "ref": "v2"}, headers={"Idempotency-Key": "x"}
    )
    first_ci.post(
        "/projects/app/deployments", {**TRIGGER, "ref": "v3"}, headers={"Idempotency-Key": "x"}
    )
    assert mine.status_code == theirs.status_code == other_body.status_code == 201
    assert theirs.json()["id"] != mine.json()["id"]  # another token's key is not a replay
    assert "Idempotent-Replayed" not in theirs
    assert Deployment.objects.count() == 4
    again = first_ci.post("/projects/app/deployments", TRIGGER, headers=key)
    assert again.json()["id"] == mine.json()["id"] and again["Idempotent-Replayed"] == "true"


def test_two_concurrent_requests_with_one_key_make_one_deployment(make_project, project_api):
    api = project_api("deploy", make_project("app"))
    barrier = threading.Barrier(2)
    statuses = []

    def send():
        client = Api(None)
        client.headers = api.headers
        barrier.wait(timeout=30)
        statuses.append(
            client.post(
                "/projects/app/deployments", TRIGGER, headers={"Idempotency-Key": "race"}
            ).status_code
        )
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) in ([201, 201], [201, 409])
    assert Deployment.objects.count() == 1


def test_retry_and_cancel_conflicts(make_project, project_api):
    api = project_api("deploy", make_project("app"))
    dep_id = api.post("/projects/app/deployments", TRIGGER).json()["id"]
    assert_error(api.post(f"/deployments/{dep_id}/retry"), 409, "conflict")
    cancelled = api.post(f"/deployments/{dep_id}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
    assert_error(api.post(f"/deployments/{dep_id}/cancel"), 409, "conflict")
    retried = api.post(f"/deployments/{dep_id}/retry")
    assert retried.status_code == 201
    assert (retried.json()["retry_of"], retried.json()["attempt"]) == (dep_id, 2)
    assert_error(api.post("/deployments/999999/retry"), 404)


def test_list_filters_and_paginates(make_project, project_api):
    api = project_api("deploy", make_project("app"))
    ids = [
        api.post("/projects/app/deployments", {"ref": f"r{i}", "environment": f"env{i}"}).json()[
            "id"
        ]
        for i in range(5)
    ]
    page = api.get("/projects/app/deployments", limit=2)
    assert [d["id"] for d in page.json()] == ids[::-1][:2]
    following = api.client.get(page["Link"].split(";")[0].strip("<>"), headers=api.headers)
    assert [d["id"] for d in following.json()] == ids[::-1][2:4]
    assert [d["id"] for d in api.get("/projects/app/deployments", environment="env1").json()] == [
        ids[1]
    ]
    assert api.get("/projects/app/deployments", status="success").json() == []
    assert_error(api.get("/projects/app/deployments", status="bogus"), 422)


def test_tail_logs_of_a_running_deployment_until_complete(make_project, project_api, deploy_worker):
    steps = [
        {"name": "count", "command": "for i in $(seq 1 30); do echo line $i; sleep 0.1; done"},
        {"name": "done", "command": "echo finished"},
    ]
    api = project_api("read", make_project("app", pipelines={"default": steps}))
    deployer = project_api("deploy", *Project.objects.all())
    deploy_worker()
    dep_id = deployer.post("/projects/app/deployments", TRIGGER).json()["id"]
    offset, text, calls = 0, "", 0
    while True:
        calls += 1
        assert calls < 200, "the log never completed"
        chunk = api.get(f"/deployments/{dep_id}/logs", offset=offset, wait=5).json()
        assert chunk["next_offset"] >= offset
        text += chunk["text"]
        offset = chunk["next_offset"]
        if chunk["complete"]:
            break
    assert calls > 1  # it really was tailed while running
    assert all(f"line {i}\n" in text for i in range(1, 31)) and "finished" in text
    final = api.get(f"/deployments/{dep_id}", wait=5).json()
    assert final["status"] == DeploymentStatus.SUCCESS
    wait_for(dep_id, DeploymentStatus.SUCCESS)


def test_cancelling_a_deployment_job_through_the_jobs_api_cancels_the_deployment(
    make_project, project_api, make_api
):
    api = project_api("deploy", make_project("app"))
    deployment = api.post("/projects/app/deployments", TRIGGER).json()
    job_id = Deployment.objects.get(pk=deployment["id"]).job_id
    assert make_api("admin").post(f"/jobs/{job_id}/cancel").status_code == 202
    after = api.get(f"/deployments/{deployment['id']}").json()
    assert (after["status"], after["failure_reason"]) == ("cancelled", "cancelled")


def test_long_polls_are_capped_so_web_threads_stay_free(make_project, project_api):
    from deployments import api as deployments_api

    api = project_api("read", make_project("app"))
    deployer = project_api("deploy", *Project.objects.all())
    dep_id = deployer.post("/projects/app/deployments", TRIGGER).json()["id"]
    held = [
        deployments_api._waiters.acquire(blocking=False) for _ in range(deployments_api.MAX_WAITERS)
    ]
    try:
        assert all(held)
        started = time.monotonic()
        answer = api.get(f"/deployments/{dep_id}", wait=10)
        assert answer.status_code == 200 and answer.json()["status"] == "pending"
        assert time.monotonic() - started < 5  # answered at once, not after 10 s
    finally:
        for _ in held:
            deployments_api._waiters.release()
    started = time.monotonic()
    api.get(f"/deployments/{dep_id}", wait=1)
    assert time.monotonic() - started >= 1  # with a free slot it does wait
