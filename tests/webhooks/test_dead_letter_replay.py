"""A dead delivery replayed to success stops counting as a dead letter everywhere.

Real worker, real receiver: two deliveries die on a 400, then are replayed (one alone, one by
``replay_since``) and delivered. /metrics' ``conveyor_dead_letters``, the dashboard, the
queues API and the Jobs list's "dead letter" filter count them while dead and not after;
the dead jobs stay (their history) with ``superseded_at`` set.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job, JobStatus
from tests.api.conftest import make_api  # noqa: F401 - fixture
from tests.console.test_console import client, samples
from tests.processes import wait_until
from tests.webhooks.receiver import Reply
from tests.webhooks.test_delivery import make_endpoint, wait_delivery
from webhooks import notify, services
from webhooks.models import Delivery, DeliveryStatus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("allow_private")]
D = DeliveryStatus
GAUGE = ("conveyor_dead_letters", (("queue", "webhooks"),))


def figures(admin_user, api) -> dict:
    """The webhooks queue's dead letters as /metrics, the dashboard and the API show them."""
    found = samples(client().get("/metrics").content.decode())
    dashboard = client(admin_user).get("/admin/dashboard/data.json").json()
    (row,) = [row for row in dashboard["queues"] if row["queue"] == "webhooks"]
    (queue,) = [queue for queue in api.get("/queues").json() if queue["name"] == "webhooks"]
    listed = client(admin_user).get("/admin/jobs/job/", {"dead_letter": "yes", "queue": "webhooks"})
    return {
        "metrics": found.get(GAUGE, 0),
        "dashboard": row["dead_letters"],
        "api": queue["dead_letters"],
        "listed": listed.context["cl"].result_count,
    }


def test_replayed_dead_deliveries_stop_counting_once_delivered(
    settings,
    receiver,
    webhook_worker,
    admin_user,
    make_api,  # noqa: F811
):
    settings.CONVEYOR_METRICS_ALLOW = "127.0.0.1"
    api = make_api("admin")
    endpoint = make_endpoint(receiver)
    receiver.script("/hook", Reply(400, b"no"), Reply(400, b"no"))  # then 200
    webhook_worker()
    since = timezone.now() - timedelta(seconds=1)
    first = notify("deployment.succeeded", {"deployment": 1})
    second = notify("deployment.succeeded", {"deployment": 2})
    deliveries = [Delivery.objects.get(event=event) for event in (first, second)]
    dead = [wait_delivery(d.pk, D.DEAD, D.DELIVERED) for d in deliveries]
    assert [d.status for d in dead] == [D.DEAD, D.DEAD]
    dead_jobs = [d.job_id for d in dead]
    assert figures(admin_user, api) == {"metrics": 2, "dashboard": 2, "api": 2, "listed": 2}

    services.delivery_replay(delivery_id=dead[0].pk, actor="test")
    assert services.delivery_replay_since(endpoint_id=endpoint.pk, since=since, actor="t") == 1
    delivered = [wait_delivery(d.pk, D.DELIVERED) for d in dead]
    # The delivery row says delivered a moment before its job's success is written.
    wait_until(
        lambda: all(Job.objects.get(pk=d.job_id).status == JobStatus.SUCCEEDED for d in delivered),
        timeout=30,
        message="the replays' jobs to succeed",
    )

    assert figures(admin_user, api) == {"metrics": 0, "dashboard": 0, "api": 0, "listed": 0}
    # The dead jobs are kept, superseded, and say so in the API.
    for job_id in dead_jobs:
        job = Job.objects.get(pk=job_id)
        assert job.status == JobStatus.DEAD and job.superseded_at is not None
        assert api.get(f"/jobs/{job_id}").json()["superseded_at"] is not None
        page = client(admin_user).get(f"/admin/jobs/job/{job_id}/change/")
        assert page.status_code == 200 and "superseded at" in page.content.decode().lower()
    superseded = client(admin_user).get("/admin/jobs/job/", {"dead_letter": "superseded"})
    assert sorted(job.pk for job in superseded.context["cl"].result_list) == sorted(dead_jobs)
