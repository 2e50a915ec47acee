"""The services the admin and the API use: endpoints, secrets, replay, dead deliveries."""

from datetime import timedelta

import pytest
from django.db.models import Q
from django.utils import timezone

from jobs.models import AuditLog, Job, JobStatus, Notification
from jobs.services import job_bury, job_cancel, job_claim
from webhooks import notify, selectors, services
from webhooks.errors import (
    DeliveryConflict,
    DeliveryNotFound,
    EndpointNotFound,
    InvalidEndpoint,
    UnknownTopic,
    WebhookError,
)
from webhooks.models import Delivery, DeliveryStatus, DisabledBy, Endpoint, Event

pytestmark = pytest.mark.django_db
D = DeliveryStatus
URL = "https://93.184.215.14/hook"


def create(topics=("deployment.succeeded",), **kwargs) -> Endpoint:
    return services.endpoint_create(url=URL, topics=list(topics), actor="ops", **kwargs)


def bury_delivery_job(delivery: Delivery) -> Job:
    """Run the engine's dead-letter path for a delivery's job, in this process."""
    job = job_claim(delivery.job_id, worker="test/1")
    job_bury(Q(pk=job.pk), error="DeliveryFailed: HTTP 500")
    return Job.objects.get(pk=job.pk)


def test_create_returns_the_endpoint_with_its_new_secret_and_audits():
    endpoint = create(topics=["job.dead", "deployment.failed", "job.dead"], description=" ci ")
    assert endpoint.secret.startswith("whsec_") and endpoint.enabled
    assert endpoint.topics == ["deployment.failed", "job.dead"]  # known order, no duplicates
    assert endpoint.description == "ci"
    assert AuditLog.objects.filter(action="webhook.endpoint_create", actor="ops").count() == 1


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"topics": ["deployment.exploded"]}, UnknownTopic),
        ({"topics": []}, UnknownTopic),
        ({"topics": "job.dead"}, UnknownTopic),
        ({"description": "x" * 301}, InvalidEndpoint),
        ({"url": "https://93.184.215.14/" + "x" * 2000}, InvalidEndpoint),
    ],
)
def test_create_refuses_bad_fields_with_domain_errors(fields, error):
    arguments = {"url": URL, "topics": ["job.dead"], **fields}
    with pytest.raises(error) as raised:
        services.endpoint_create(**arguments)
    assert isinstance(raised.value, WebhookError) and raised.value.http_status == 422
    assert not Endpoint.objects.exists()


def test_update_changes_only_the_given_fields():
    endpoint = create()
    secret = endpoint.secret
    updated = services.endpoint_update(
        endpoint_id=endpoint.pk, actor="ops", topics=["worktree.pruned"]
    )
    assert updated.topics == ["worktree.pruned"] and updated.url == URL
    assert updated.secret == secret
    with pytest.raises(UnknownTopic):
        services.endpoint_update(endpoint_id=endpoint.pk, actor="ops", topics=["nope"])
    with pytest.raises(EndpointNotFound):
        services.endpoint_update(endpoint_id=endpoint.pk + 100, actor="ops", description="x")


def test_update_can_disable_by_hand_and_enable_again():
    endpoint = create()
    disabled = services.endpoint_update(endpoint_id=endpoint.pk, actor="ops", enabled=False)
    assert not disabled.enabled and disabled.disabled_by == DisabledBy.MANUAL
    Endpoint.objects.filter(pk=endpoint.pk).update(consecutive_dead=4)
    enabled = services.endpoint_update(endpoint_id=endpoint.pk, actor="ops", enabled=True)
    assert enabled.enabled and enabled.disabled_by == "" and enabled.consecutive_dead == 0
    assert enabled.disabled_reason == "" and enabled.disabled_at is None


def test_rotation_keeps_the_old_secret_for_24_hours():
    endpoint = create()
    old = endpoint.secret
    before = timezone.now()
    rotated = services.endpoint_rotate_secret(endpoint_id=endpoint.pk, actor="ops")
    assert rotated.secret != old and rotated.secret.startswith("whsec_")
    assert rotated.previous_secret == old
    expires = rotated.previous_secret_expires_at
    assert before + timedelta(hours=24) <= expires <= timezone.now() + timedelta(hours=24)
    assert AuditLog.objects.filter(action="webhook.endpoint_rotate_secret").count() == 1


def test_a_test_event_goes_to_one_endpoint_even_a_disabled_one():
    endpoint = create(topics=["job.dead"])
    services.endpoint_disable(endpoint_id=endpoint.pk, actor="ops")
    other = create(topics=["job.dead"])
    delivery = services.endpoint_send_test(endpoint_id=endpoint.pk, actor="ops")
    assert delivery.endpoint_id == endpoint.pk and delivery.status == D.PENDING
    assert delivery.event.type == "webhook.test" and delivery.job is not None
    assert not Delivery.objects.filter(endpoint=other).exists()


def test_a_test_event_is_refused_when_webhooks_are_disabled(settings):
    settings.CONVEYOR_WEBHOOKS_ENABLED = False
    endpoint = create()
    with pytest.raises(WebhookError, match="disabled"):
        services.endpoint_send_test(endpoint_id=endpoint.pk, actor="ops")
    assert not Event.objects.exists()


def test_a_dead_delivery_job_marks_its_delivery_dead_and_counts_it():
    endpoint = create()
    (delivery,) = notify("deployment.succeeded", {}).deliveries.all()
    job = bury_delivery_job(delivery)
    delivery.refresh_from_db()
    assert job.status == JobStatus.DEAD
    assert delivery.status == D.DEAD and delivery.last_error == "DeliveryFailed: HTTP 500"
    assert Endpoint.objects.get(pk=endpoint.pk).consecutive_dead == 1
    # The engine's dead letter, with the webhook notice topic, and no job.dead event.
    assert Notification.objects.filter(topic="webhook.dead_letter").count() == 0  # no staff
    assert not Event.objects.filter(type="job.dead").exists()


def test_the_endpoint_is_disabled_at_the_threshold_exactly_once(settings, django_user_model):
    settings.CONVEYOR_WEBHOOK_DISABLE_AFTER = 3
    admin = django_user_model.objects.create_user("admin", is_staff=True)
    endpoint = create()
    deliveries = [notify("deployment.succeeded", {"n": n}).deliveries.get() for n in range(4)]
    for delivery in deliveries[:2]:
        bury_delivery_job(delivery)
    assert Endpoint.objects.get(pk=endpoint.pk).enabled  # 2 < 3
    bury_delivery_job(deliveries[2])
    endpoint.refresh_from_db()
    assert not endpoint.enabled and endpoint.disabled_by == DisabledBy.FAILURES
    assert "3 consecutive deliveries failed" in endpoint.disabled_reason
    bury_delivery_job(deliveries[3])  # a fourth death does not disable (or notify) again
    notices = Notification.objects.filter(topic="webhook.endpoint_disabled")
    assert [n.recipient_id for n in notices] == [admin.pk]
    assert AuditLog.objects.filter(action="webhook.endpoint_disable", actor="system").count() == 1


def test_a_dead_test_delivery_does_not_count_towards_disabling():
    endpoint = create()
    bury_delivery_job(services.endpoint_send_test(endpoint_id=endpoint.pk, actor="ops"))
    assert Endpoint.objects.get(pk=endpoint.pk).consecutive_dead == 0


def test_other_dead_jobs_are_announced_as_job_dead():
    create(topics=["job.dead"])
    job = Job.objects.create(
        task="jobs.noop",
        status=JobStatus.RUNNING,
        locked_by="w/1",
        attempts=5,
        run_after=timezone.now(),
        created_at=timezone.now(),
        updated_at=timezone.now(),
    )
    job_bury(Q(pk=job.pk), error="Boom: it broke")
    (event,) = Event.objects.filter(type="job.dead")
    assert event.data["job_id"] == job.pk and event.data["error"] == "Boom: it broke"
    assert event.deliveries.get().status == D.PENDING


def test_a_failing_receiver_never_undoes_the_burial(monkeypatch):
    monkeypatch.setattr("webhooks.receivers.notify", lambda *a, **k: 1 / 0)
    job = Job.objects.create(
        task="jobs.noop",
        status=JobStatus.RUNNING,
        locked_by="w/1",
        run_after=timezone.now(),
        created_at=timezone.now(),
        updated_at=timezone.now(),
    )
    assert len(job_bury(Q(pk=job.pk), error="x")) == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD


def test_replay_of_a_dead_delivery_gives_it_a_fresh_job():
    create()
    (delivery,) = notify("deployment.succeeded", {}).deliveries.all()
    old_job = bury_delivery_job(delivery)
    replayed = services.delivery_replay(delivery_id=delivery.pk, actor="ops")
    assert replayed.status == D.PENDING and replayed.replays == 1
    assert replayed.job_id != old_job.pk and replayed.job.status == JobStatus.QUEUED
    assert AuditLog.objects.filter(action="webhook.delivery_replay").count() == 1


def test_replay_is_refused_in_flight_for_a_disabled_endpoint_and_for_nothing():
    endpoint = create()
    (delivery,) = notify("deployment.succeeded", {}).deliveries.all()
    with pytest.raises(DeliveryConflict, match="still being delivered"):
        services.delivery_replay(delivery_id=delivery.pk, actor="ops")
    bury_delivery_job(delivery)
    services.endpoint_disable(endpoint_id=endpoint.pk, actor="ops")
    with pytest.raises(DeliveryConflict, match="disabled") as raised:
        services.delivery_replay(delivery_id=delivery.pk, actor="ops")
    assert raised.value.http_status == 409
    with pytest.raises(DeliveryNotFound):
        services.delivery_replay(delivery_id=delivery.pk + 100, actor="ops")


def test_a_delivery_whose_job_was_cancelled_can_be_replayed():
    create()
    (delivery,) = notify("deployment.succeeded", {}).deliveries.all()
    job_cancel(delivery.job_id, actor="ops")
    replayed = services.delivery_replay(delivery_id=delivery.pk, actor="ops")
    assert replayed.status == D.PENDING and replayed.job_id != delivery.job_id


def test_replay_since_takes_dead_and_skipped_deliveries_from_the_cutoff_on(monkeypatch):
    monkeypatch.setattr(services, "REPLAY_BATCH", 2)
    endpoint = create()
    other = create()
    since = timezone.now()
    rows = {}
    for name, status, offset in [
        ("before", D.DEAD, -1),
        ("at", D.DEAD, 0),
        ("skipped", D.SKIPPED, 1),
        ("dead", D.DEAD, 2),
        ("more", D.SKIPPED, 3),
        ("delivered", D.DELIVERED, 4),
        ("pending", D.PENDING, 5),
    ]:
        event = notify("worktree.pruned", {"name": name})  # nobody subscribes: no delivery
        rows[name] = Delivery.objects.create(
            event=event,
            endpoint=endpoint,
            status=status,
            created_at=since + timedelta(seconds=offset),
            updated_at=since,
        )
    Delivery.objects.create(
        event=rows["at"].event, endpoint=other, status=D.DEAD, created_at=since, updated_at=since
    )
    assert services.delivery_replay_since(endpoint_id=endpoint.pk, since=since, actor="ops") == 4
    statuses = {name: Delivery.objects.get(pk=row.pk).status for name, row in rows.items()}
    assert statuses == {
        "before": D.DEAD,
        "at": D.PENDING,
        "skipped": D.PENDING,
        "dead": D.PENDING,
        "more": D.PENDING,
        "delivered": D.DELIVERED,
        "pending": D.PENDING,
    }
    replayed = Delivery.objects.filter(
        pk__in=[rows[n].pk for n in ("at", "skipped", "dead", "more")]
    )
    assert all(d.job_id and d.replays == 1 for d in replayed)
    assert Job.objects.filter(task="webhooks.deliver").count() == 4  # exactly one job each
    assert Delivery.objects.get(endpoint=other).status == D.DEAD
    audit = AuditLog.objects.get(action="webhook.delivery_replay_since")
    assert audit.details["count"] == 4


def test_replay_since_needs_an_enabled_endpoint():
    endpoint = create()
    services.endpoint_disable(endpoint_id=endpoint.pk, actor="ops")
    with pytest.raises(DeliveryConflict):
        services.delivery_replay_since(endpoint_id=endpoint.pk, since=timezone.now(), actor="o")
    with pytest.raises(EndpointNotFound):
        services.delivery_replay_since(endpoint_id=999, since=timezone.now(), actor="o")


def test_selectors_filter_deliveries_by_endpoint_and_status():
    first, second = create(), create()
    event = notify("deployment.succeeded", {})
    bury_delivery_job(event.deliveries.get(endpoint=first))
    dead = selectors.delivery_list(endpoint_id=first.pk, status="dead")
    assert [d.endpoint_id for d in dead] == [first.pk] and dead[0].attempt_count == 0
    assert [d.endpoint_id for d in selectors.delivery_list(status="pending")] == [second.pk]
    assert selectors.delivery_list(endpoint_id=second.pk, status="dead").count() == 0
    with pytest.raises(WebhookError, match="unknown delivery status"):
        selectors.delivery_list(status="lost")
    assert [e.pk for e in selectors.endpoint_list(topic="deployment.succeeded")] == [
        first.pk,
        second.pk,
    ]
    assert selectors.endpoint_list(topic="job.dead") == []
    with pytest.raises(EndpointNotFound):
        selectors.endpoint_get(endpoint_id=999)
    assert selectors.delivery_get(delivery_id=dead[0].pk).status == D.DEAD


def test_delete_removes_the_endpoint_and_its_deliveries_but_keeps_events():
    endpoint = create()
    event = notify("deployment.succeeded", {})
    services.endpoint_delete(endpoint_id=endpoint.pk, actor="ops")
    assert not Endpoint.objects.exists() and not Delivery.objects.exists()
    assert Event.objects.filter(pk=event.pk).exists()
