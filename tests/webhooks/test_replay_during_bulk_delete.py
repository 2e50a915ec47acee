"""A delivery replayed while a bulk delete of its dead job runs: neither waits for the other
for ever (the batch locks the delivery before the job, as the replay does)."""

import threading
import time

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.models.deletion import Collector

from jobs import bulk
from jobs.models import BulkAction, Job
from tests.webhooks.test_services import bury_delivery_job, create
from webhooks import notify
from webhooks import services as webhook_services

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_replay_during_a_bulk_delete_of_its_dead_job_does_not_deadlock(
    django_user_model, monkeypatch
):
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite writes one transaction at a time)")
    create()
    (delivery,) = notify("deployment.succeeded", {}).deliveries.all()
    dead = bury_delivery_job(delivery)
    user = django_user_model.objects.create_user("op", password="op-pw-1", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "delete_job"]))
    operation = bulk.bulk_create(action=BulkAction.DELETE, filters={}, user=user)
    replay: dict = {}

    def operator_replays():
        try:
            webhook_services.delivery_replay(delivery_id=delivery.pk, actor="ops")
            replay["outcome"] = "replayed"
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test reads
            replay["outcome"] = repr(exc)
        finally:
            connection.close()

    delete = Collector.delete

    def replayed_meanwhile(collector):  # the batch holds its rows; Django's delete is next
        replay["thread"] = threading.Thread(target=operator_replays)
        replay["thread"].start()
        time.sleep(1.0)  # the replay waits for a row lock by now (or has ended)
        return delete(collector)

    monkeypatch.setattr(Collector, "delete", replayed_meanwhile)
    bulk.bulk_run(operation.pk, batch_size=10, pause=0)
    replay["thread"].join(timeout=30)
    operation.refresh_from_db()
    assert replay["outcome"] == "replayed"  # once the batch committed; no deadlock
    assert (operation.done, operation.failed) == (1, 0)
    assert not Job.objects.filter(pk=dead.pk).exists()
