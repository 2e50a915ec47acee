"""The ``webhooks.deliver`` task in this process: what one delivery costs the database."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import queues, task_states
from jobs.models import JobStatus
from webhooks import notify, services
from webhooks.models import AttemptOutcome, Delivery, DeliveryStatus, Endpoint
from webhooks.tasks import deliver

pytestmark = pytest.mark.usefixtures("allow_private")


@pytest.mark.django_db(transaction=True)  # autocommit, as in a worker: BEGIN/COMMIT counted
def test_a_successful_delivery_costs_four_sql_messages(receiver):
    endpoint = services.endpoint_create(url=receiver.url(), topics=["job.dead"])
    Endpoint.objects.filter(pk=endpoint.pk).update(consecutive_dead=3)
    (delivery,) = notify("job.dead", {"job_id": 1}).deliveries.all()
    queues.ensure_states()  # as every worker does when it starts
    task_states.ensure_states()

    with CaptureQueriesContext(connection) as queries:
        deliver(delivery.job_id)
    # This connection's first limited claim prepares its lock and its pick (jobs.prepared),
    # once, in a message each.
    prepares = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SET plan")]
    assert len(prepares) == 2 and len(queries.captured_queries) == 6
    lock, claim = prepares
    assert "jobs_taskstate" in lock and "FOR UPDATE OF t" in lock
    assert "UPDATE jobs_job" in claim and "limit_key" in claim
    delivery = Delivery.objects.select_related("job").get(pk=delivery.pk)
    assert delivery.status == DeliveryStatus.DELIVERED

    Endpoint.objects.filter(pk=endpoint.pk).update(consecutive_dead=3)
    (delivery,) = notify("job.dead", {"job_id": 2}).deliveries.all()
    with CaptureQueriesContext(connection) as queries:
        deliver(delivery.job_id)
    statements = [(q["sql"].split()[0], q["sql"]) for q in queries.captured_queries]
    # The claim under the per-endpoint limit (jobs.claim_at_once): one message, one implicit
    # transaction, that locks the queue's and the task's state rows and then, in a statement
    # of its own, claims the best job whose endpoint has room. Then the read of delivery +
    # event + endpoint, the attempt row written with the delivery's move and the endpoint's
    # reset in one statement, and the job's completion, which reads the task's held mark in
    # its own statement (a slot is free: ring only if a claim was refused).
    kinds = [kind for kind, _ in statements]
    assert kinds == ["SELECT", "SELECT", "WITH", "WITH"]
    assert statements[0][1].count("EXECUTE conveyor_") == 2  # the lock and the pick
    assert "held_at" in statements[3][1] and "jobs_taskstate" in statements[3][1]
    assert "FOR KEY SHARE" in statements[3][1]  # waits for a claim deciding a refusal
    record = statements[2][1]
    for table in ("webhooks_deliveryattempt", "webhooks_endpoint", "webhooks_delivery"):
        assert f'"{table}"' in record

    delivery = Delivery.objects.select_related("job").get(pk=delivery.pk)
    assert delivery.status == DeliveryStatus.DELIVERED and delivery.delivered_at is not None
    assert delivery.last_status_code == 200 and delivery.job.status == JobStatus.SUCCEEDED
    (attempt,) = delivery.attempts.all()
    assert attempt.outcome == AttemptOutcome.DELIVERED and attempt.number == 1
    assert Endpoint.objects.get(pk=endpoint.pk).consecutive_dead == 0
    assert len(receiver.received()) == 2  # one post per delivery


@pytest.mark.django_db(transaction=True)
def test_a_response_body_with_a_nul_byte_is_kept_escaped_and_not_sent_again(receiver):
    from tests.webhooks.receiver import Reply

    receiver.default = Reply(200, body=b"ok\x00evil")
    services.endpoint_create(url=receiver.url(), topics=["job.dead"])
    (delivery,) = notify("job.dead", {"job_id": 1}).deliveries.all()
    deliver(delivery.job_id)
    delivery = Delivery.objects.select_related("job").get(pk=delivery.pk)
    assert delivery.status == DeliveryStatus.DELIVERED
    assert delivery.job.status == JobStatus.SUCCEEDED
    assert delivery.attempts.get().response_body == "ok\\x00evil"
    assert len(receiver.received()) == 1
