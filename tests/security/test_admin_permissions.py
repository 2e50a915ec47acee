"""Every custom admin action needs its permission: view-only staff can look, not act.

Real permission rows: one staff user holds only the ``view_*`` permissions of every Conveyor
model; another holds those plus exactly the one permission an action declares.
"""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from deployments.models import Deployment
from deployments.services import deployment_cancel, deployment_create
from jobs.models import Job, JobStatus
from project.access.models import ApiToken
from project.access.tokens import token_create
from tests.webhooks.test_admin import dead_delivery
from webhooks import services as webhook_services
from webhooks.models import Delivery, Endpoint, Event

APPS = ("jobs", "access", "webhooks", "deployments")
URL = "https://93.184.215.14/hook"


def staff_client(name: str, *extra: str) -> Client:
    """Log in a staff user holding every view permission of Conveyor's apps, plus ``extra``."""
    user = get_user_model().objects.create_user(name, password="pw-123456", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label__in=APPS, codename__startswith="view_")
    )
    for perm in extra:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


def _job(status) -> Job:
    now = timezone.now()
    return Job.objects.create(
        task="tests.record", status=status, run_after=now, created_at=now, updated_at=now
    )


def _endpoint(enabled: bool = True) -> Endpoint:
    endpoint = webhook_services.endpoint_create(url=URL, topics=["job.dead"], actor="test")
    if not enabled:
        webhook_services.endpoint_disable(endpoint_id=endpoint.pk, actor="test")
    return endpoint


def _pending(make_project) -> Deployment:
    return deployment_create(project=make_project(), ref="main")


def _cancelled(make_project) -> Deployment:
    deployment = _pending(make_project)
    return deployment_cancel(deployment_id=deployment.pk, actor="test")


# (admin model, action, permission it needs, make(make_project) -> object, state(object))
CASES = [
    ("jobs/job", "retry_jobs", "jobs.retry_job", lambda mp: _job(JobStatus.DEAD), None),
    ("jobs/job", "cancel_jobs", "jobs.cancel_job", lambda mp: _job(JobStatus.QUEUED), None),
    (
        "access/apitoken",
        "revoke",
        "access.revoke_apitoken",
        lambda mp: token_create(name="ci")[0],
        lambda token: ApiToken.objects.get(pk=token.pk).revoked_at,
    ),
    (
        "deployments/deployment",
        "cancel_deployments",
        "deployments.cancel_deployment",
        _pending,
        None,
    ),
    (
        "deployments/deployment",
        "retry_deployments",
        "deployments.run_deployment",
        _cancelled,
        lambda d: Deployment.objects.filter(retry_of=d).count(),
    ),
    (
        "webhooks/endpoint",
        "enable",
        "webhooks.change_endpoint",
        lambda mp: _endpoint(enabled=False),
        None,
    ),
    ("webhooks/endpoint", "disable", "webhooks.change_endpoint", lambda mp: _endpoint(), None),
    (
        "webhooks/endpoint",
        "rotate_secret",
        "webhooks.rotate_secret",
        lambda mp: _endpoint(),
        lambda e: Endpoint.objects.get(pk=e.pk).secret,
    ),
    (
        "webhooks/endpoint",
        "send_test",
        "webhooks.send_test",
        lambda mp: _endpoint(),
        lambda e: Event.objects.filter(type="webhook.test").count(),
    ),
    (
        "webhooks/endpoint",
        "replay_since",
        "webhooks.replay_delivery",
        lambda mp: dead_delivery(_endpoint()).endpoint,
        lambda e: list(Delivery.objects.filter(endpoint=e).values_list("status", "replays")),
    ),
    (
        "webhooks/delivery",
        "replay",
        "webhooks.replay_delivery",
        lambda mp: dead_delivery(_endpoint()),
        None,
    ),
]


def _state(obj, state):
    if state is not None:
        return state(obj)
    obj.refresh_from_db()
    return (getattr(obj, "status", None), getattr(obj, "enabled", None))


def _run(client: Client, model: str, action: str, obj):
    data = {"action": action, "_selected_action": [str(obj.pk)]}
    if action == "replay_since":
        since = timezone.now() - timedelta(days=1)
        data.update(apply="1", since_0=since.strftime("%Y-%m-%d"), since_1="00:00:00")
    return client.post(f"/admin/{model}/", data, follow=True)


def _offered(client: Client, model: str, action: str) -> bool:
    page = client.get(f"/admin/{model}/")
    assert page.status_code == 200
    return f'value="{action}"' in page.content.decode()


@pytest.mark.parametrize(
    ("model", "action", "permission", "make", "state"),
    CASES,
    ids=[f"{case[0]}:{case[1]}" for case in CASES],
)
def test_view_only_staff_cannot_run_an_action_and_its_holder_can(
    make_project, model, action, permission, make, state
):
    obj = make(make_project)
    before = _state(obj, state)
    secrets_before = set(Endpoint.objects.values_list("secret", flat=True))

    viewer = staff_client("viewer")
    assert not _offered(viewer, model, action)
    response = _run(viewer, model, action, obj)
    assert response.status_code == 200
    assert _state(obj, state) == before, f"{action} ran for a view-only user"
    body = response.content.decode()
    assert "whsec_" not in body and not any(secret in body for secret in secrets_before)

    holder = staff_client("holder", permission)
    assert _offered(holder, model, action)
    _run(holder, model, action, obj)
    assert _state(obj, state) != before, f"{action} did not run with {permission}"


def test_a_view_only_user_sees_pages_but_no_secret(make_project):
    endpoint = _endpoint()
    delivery = dead_delivery(endpoint)
    viewer = staff_client("viewer")
    for path in (
        "/admin/webhooks/endpoint/",
        f"/admin/webhooks/endpoint/{endpoint.pk}/change/",
        f"/admin/webhooks/delivery/{delivery.pk}/change/",
        "/admin/access/apitoken/",
    ):
        page = viewer.get(path)
        assert page.status_code == 200, path
        assert (
            endpoint.secret not in page.content.decode() and "whsec_" not in page.content.decode()
        )


def test_an_action_needing_a_permission_is_hidden_from_the_menu_until_granted(db):
    viewer = staff_client("viewer")
    assert not _offered(viewer, "jobs/job", "retry_jobs")
    retrier = staff_client("retrier", "jobs.retry_job")
    assert _offered(retrier, "jobs/job", "retry_jobs")
    assert not _offered(retrier, "jobs/job", "cancel_jobs")
