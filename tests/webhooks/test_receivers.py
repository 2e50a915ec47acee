"""A dead delivery job whose delivery cannot be marked is no silent loss: staff are told."""

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Q

from jobs.models import Job, JobStatus, Notification
from jobs.services import enqueue, job_bury, job_claim

pytestmark = pytest.mark.django_db


def test_a_dead_delivery_job_whose_delivery_cannot_be_marked_tells_staff():
    get_user_model().objects.create_user("ops", is_staff=True)
    job = enqueue("webhooks.deliver", {"delivery_id": "x", "endpoint_id": 1}, queue="webhooks")
    assert job_claim(job.pk, worker="w/1") is not None
    job_bury(Q(pk=job.pk), error="DeliveryFailed: HTTP 500")
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD
    (notice,) = Notification.objects.filter(topic="webhook.job_dead_failed")
    assert notice.title == f"the dead webhooks.deliver job {job.pk} could not be followed up"
    assert notice.data == {"job_id": job.pk, "task": "webhooks.deliver"}
