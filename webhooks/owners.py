"""Webhooks own their ``webhooks.deliver`` jobs: how the Jobs pages show and act on them.

A retry of the job replays its delivery (a fresh job, the same event and ``webhook-id``);
a cancel ends the delivery too (``dead``, "cancelled by …"). Registered with the job engine
in ``WebhooksConfig.ready``.
"""

from jobs import owners
from jobs.models import Job
from project.admin_urls import url_per_pk
from webhooks import services
from webhooks.dispatch import DELIVER_TASK
from webhooks.errors import WebhookError
from webhooks.models import Delivery, DeliveryStatus


def _delivery_id(job: Job) -> int:
    delivery_id = (job.payload or {}).get("delivery_id")
    if delivery_id is None:
        raise owners.OwnerRefused(f"job {job.pk} names no delivery")
    return int(delivery_id)


def _describe(jobs: list[Job]) -> dict[int, owners.OwnerInfo]:
    ids = {job.pk: (job.payload or {}).get("delivery_id") for job in jobs}
    # Only what the label shows: not the event's body (the whole payload sent) nor the secret.
    found = (
        Delivery.objects.select_related("event", "endpoint")
        .only("status", "event__type", "endpoint__description")
        .in_bulk([i for i in ids.values() if i is not None])
    )
    change_url = url_per_pk("admin:webhooks_delivery_change")
    described = {}
    for job_id, delivery_id in ids.items():
        delivery = found.get(delivery_id)
        if delivery is None:
            continue
        described[job_id] = owners.OwnerInfo(
            kind="delivery",
            id=delivery.pk,
            # The endpoint by its name, never its URL: whoever may see jobs sees this label.
            label=f"delivery {delivery.pk} ({delivery.event.type} → {delivery.endpoint})",
            status=delivery.status,
            url=change_url(delivery.pk),
            failed=delivery.status == DeliveryStatus.DEAD,
        )
    return described


def _retry(job: Job, actor: str, user=None) -> Job:
    try:
        delivery = services.delivery_replay(delivery_id=_delivery_id(job), actor=actor)
    except WebhookError as exc:
        raise owners.OwnerRefused(str(exc)) from exc
    return delivery.job


def _cancel(job: Job, actor: str) -> Job:
    try:
        return services.delivery_cancel(delivery_id=_delivery_id(job), job_id=job.pk, actor=actor)
    except WebhookError as exc:
        raise owners.OwnerRefused(str(exc)) from exc


def _failed_job_ids():
    return Delivery.objects.filter(status=DeliveryStatus.DEAD, job_id__isnull=False).values(
        "job_id"
    )


def _jobs_of_delivery(delivery_id: int):
    return Delivery.objects.filter(pk=delivery_id, job_id__isnull=False).values("job_id")


def _jobs_of_endpoint(endpoint_id: int):
    return Delivery.objects.filter(endpoint_id=endpoint_id, job_id__isnull=False).values("job_id")


OWNER = owners.Owner(
    describe=_describe,
    retry=_retry,
    cancel=_cancel,
    failed_job_ids=_failed_job_ids,
    notes={
        "retry": "Retry replays the delivery: a new job sends the same event (same webhook-id).",
        "cancel": "Cancel also ends the delivery (dead, cancelled by you).",
    },
    dead_notice_topic="webhook.dead_letter",
    # A delivery's current job (a replay moves it to the new one).
    jobs_of={"delivery": _jobs_of_delivery, "endpoint": _jobs_of_endpoint},
)


def register() -> None:
    owners.register(DELIVER_TASK, OWNER)
