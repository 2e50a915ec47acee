"""The Jobs list's typed filters and bulk pages, as view-only staff and as a hostile user.

A payload filter's key is a JSON key, never an ORM path, so it cannot reach a secret of
another model; its value cannot be told apart from a wrong guess unless the payload holds
it (and the job page shows the payload to the same people). The bulk pages refuse a user
without the single action's permission, and no value sent to a filter is a 500.
"""

import pytest
from django.urls import reverse

from jobs import services
from jobs.models import AuditLog, BulkOperation, Job
from webhooks.models import Endpoint

pytestmark = pytest.mark.django_db
LIST = "/admin/jobs/job/"

HOSTILE = {
    "payload": [
        "a=\x00",
        'a="\\u0000"',
        "\x00=1",
        "a=1e999",
        "a=NaN",
        "a=" + "9" * 400,
        "." * 50 + "=1",
        "a=" + "x" * 600,
        "a" * 5000 + "=1",
        "a=[1, {}]",
        "=",
    ],
    "error_class": ["\x00", "a" * 5000, "Value Error", "ValueError%"],
    "owned_by": ["deployment:" + "9" * 30, "deployment:-1", "endpoint:\x00", ":", "x" * 900],
}


def _count(client, params) -> tuple[int, int | None]:
    response = client.get(LIST, params)
    assert response.status_code != 500, params
    cl = response.context["cl"] if response.status_code == 200 else None
    return response.status_code, cl.result_count if cl else None


def test_a_payload_key_cannot_reach_another_models_secret(secrets_everywhere, viewer):
    services.enqueue("jobs.noop", {"note": "plain"})
    secret = Endpoint.objects.get().secret
    for path in ("deliveries__endpoint__secret", "endpoint__secret__startswith", "secret"):
        right = _count(viewer, {"payload": f"{path}={secret}"})
        wrong = _count(viewer, {"payload": f"{path}=~{secret[1:]}"})
        assert right == wrong == (200, 0), path


@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, values in HOSTILE.items() for value in values]
)
def test_a_hostile_filter_value_is_never_a_500(admin_client, name, value):
    services.enqueue("jobs.noop", {"a": 1})
    _count(admin_client, {name: value})
    response = admin_client.get(reverse("admin:jobs_job_bulk", args=["retry"]), {name: value})
    assert response.status_code in (200, 302, 400), (name, value)  # 400: a NUL in the URL


def test_view_only_staff_get_no_bulk_button_and_a_403(secrets_everywhere, viewer):
    services.enqueue("jobs.noop", {})
    assert "bulk/" not in viewer.get(LIST).content.decode()
    for action in ("retry", "cancel", "delete"):
        url = reverse("admin:jobs_job_bulk", args=[action])
        assert viewer.get(url).status_code == 403
        assert viewer.post(url, {}).status_code == 403
    assert viewer.post(reverse("admin:jobs_job_bulk", args=["explode"]), {}).status_code == 404
    assert not BulkOperation.objects.exists()
    assert not Job.objects.filter(task="jobs.bulk_operate").exists()
    assert not AuditLog.objects.filter(action__startswith="job.bulk_").exists()


def test_the_bulk_pages_need_the_right_to_view_jobs_too(django_user_model):
    """Else a user holding only retry_job could count what a payload guess matches."""
    from django.contrib.auth.models import Permission
    from django.test import Client

    services.enqueue("jobs.noop", {"token": "s3cret-value"})
    user = django_user_model.objects.create_user("blind", password="blind-pw-1", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="retry_job"))
    client = Client()
    client.force_login(user)
    url = reverse("admin:jobs_job_bulk", args=["retry"])
    for guess in ("token=s3cret-value", "token=wrong"):
        assert client.get(url, {"payload": guess}).status_code == 403
        assert client.post(url, {"payload": guess}).status_code == 403
    assert not BulkOperation.objects.exists()


def test_the_bulk_operations_list_hides_a_payload_filters_value(django_user_model, admin_user):
    from django.contrib.auth.models import Permission
    from django.test import Client

    from jobs import bulk

    services.enqueue("jobs.noop", {"token": "s3cret-value"})
    bulk.bulk_create(action="retry", filters={"payload": ["token=s3cret-value"]}, user=admin_user)
    user = django_user_model.objects.create_user("auditor", password="aud-pw-1", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_bulkoperation"))
    client = Client()
    client.force_login(user)
    operation = BulkOperation.objects.get()
    for url in (
        reverse("admin:jobs_bulkoperation_changelist"),
        reverse("admin:jobs_bulkoperation_change", args=[operation.pk]),
    ):
        page = client.get(url)
        assert page.status_code == 200 and "token=***" in page.content.decode()
        assert "s3cret-value" not in page.content.decode()
    assert (
        client.get(reverse("admin:jobs_job_bulk_progress", args=[operation.pk])).status_code == 403
    )
