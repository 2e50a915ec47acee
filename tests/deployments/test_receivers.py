"""A dead job whose deployment cannot be failed is no silent loss: staff are told."""

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Q

from jobs.models import Job, JobStatus, Notification
from jobs.services import enqueue, job_bury, job_claim

pytestmark = pytest.mark.django_db


def test_a_dead_run_job_whose_deployment_cannot_be_failed_tells_staff():
    get_user_model().objects.create_user("ops", is_staff=True)
    job = enqueue("deployments.run", {"deployment_id": "not-a-number"}, queue="deployments")
    assert job_claim(job.pk, worker="w/1") is not None
    job_bury(Q(pk=job.pk), error="WorkerLostError: gone")
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD  # the burial stands
    (notice,) = Notification.objects.filter(topic="deployment.fail_on_dead_job_failed")
    assert (
        notice.title == f"deployment not-a-number could not be failed after its job {job.pk} died"
    )
    assert notice.body.startswith("ValueError") and notice.data["job_id"] == job.pk
