"""The read of one attempt: a delivery with what it needs of its event and endpoint."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from webhooks import notify, services
from webhooks.selectors import outgoing_get

pytestmark = pytest.mark.django_db
URL = "https://93.184.215.14/hook"


def test_outgoing_reads_the_delivery_its_event_and_its_endpoint_in_one_statement():
    endpoint = services.endpoint_create(url=URL, topics=["job.dead"])
    rotated = services.endpoint_rotate_secret(endpoint_id=endpoint.pk, actor="ops")
    event = notify("job.dead", {"job_id": 4})
    (delivery,) = event.deliveries.all()

    with CaptureQueriesContext(connection) as queries:
        outgoing = outgoing_get(delivery_id=delivery.pk)

    assert len(queries) == 1
    assert outgoing.delivery_id == delivery.pk and outgoing.status == "pending"
    assert outgoing.endpoint_id == endpoint.pk and outgoing.enabled is True
    assert outgoing.url == URL and outgoing.secret == rotated.secret
    assert outgoing.previous_secret == endpoint.secret
    assert outgoing.previous_secret_expires_at == rotated.previous_secret_expires_at
    assert outgoing.message_id == event.message_id and outgoing.topic == "job.dead"
    assert json.loads(outgoing.body)["data"] == {"job_id": 4}


def test_outgoing_sees_changes_made_after_the_first_read():
    endpoint = services.endpoint_create(url=URL, topics=["job.dead"])
    (delivery,) = notify("job.dead", {}).deliveries.all()
    assert outgoing_get(delivery_id=delivery.pk).enabled is True
    services.endpoint_disable(endpoint_id=endpoint.pk, actor="ops")
    assert outgoing_get(delivery_id=delivery.pk).enabled is False


def test_outgoing_of_a_missing_delivery_is_none():
    assert outgoing_get(delivery_id=123456) is None
