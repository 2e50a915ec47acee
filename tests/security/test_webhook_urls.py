"""A deployment's timeline names webhook endpoints by id and description to those who can't
see webhooks: no URL (it may be a credential) and no delivery error that may echo it.

Through the API with read, deploy and admin tokens, and through the console's deployment page
with staff users of different permissions.
"""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from deployments.services import deployment_cancel, deployment_create
from webhooks import services as webhook_services
from webhooks.models import Delivery, DeliveryAttempt

SECRET_PATH = "T0001/B0002/XoXbCredentialPart"
URL = f"https://93.184.215.14/services/{SECRET_PATH}"


@pytest.fixture
def delivered(make_project):
    """A cancelled deployment whose webhook delivery failed with an error echoing the URL."""
    project = make_project()
    endpoint = webhook_services.endpoint_create(
        url=URL, topics=["deployment.cancelled"], actor="test", description="chat channel"
    )
    deployment = deployment_create(project=project, ref="main", triggered_by="ci")
    deployment_cancel(deployment_id=deployment.pk, actor="ci")
    delivery = Delivery.objects.get(endpoint=endpoint)
    DeliveryAttempt.objects.create(
        delivery=delivery,
        number=1,
        started_at=timezone.now(),
        status_code=404,
        latency_ms=7,
        response_body=f"no such hook {URL}",
        error=f"HTTP 404 from {URL}",
        outcome="retry",
    )
    return project, deployment, endpoint


def _attempts(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return [e for e in response.json()["events"] if e["kind"] == "delivery_attempt"]


@pytest.mark.parametrize("scope", ["read", "deploy"])
def test_read_and_deploy_tokens_see_the_endpoint_by_id_and_description(
    delivered, project_api, scope
):
    project, deployment, endpoint = delivered
    response = project_api(scope, project).get(f"/deployments/{deployment.pk}/timeline")
    assert SECRET_PATH not in response.content.decode()
    (attempt,) = _attempts(response)
    assert attempt["endpoint_id"] == endpoint.pk
    assert attempt["endpoint_description"] == "chat channel"
    assert f"endpoint #{endpoint.pk} (chat channel)" in attempt["summary"]
    assert "endpoint" not in attempt and "error" not in attempt


def test_an_admin_token_sees_the_url_and_the_error(delivered, make_api):
    _, deployment, endpoint = delivered
    (attempt,) = _attempts(make_api("admin").get(f"/deployments/{deployment.pk}/timeline"))
    assert attempt["endpoint"] == URL and attempt["endpoint_id"] == endpoint.pk
    assert attempt["error"] == f"HTTP 404 from {URL}"


def _staff(django_user_model, name: str, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(name, password="pw-123456", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_the_console_shows_the_url_only_to_users_who_may_view_endpoints(
    delivered, django_user_model
):
    _, deployment, endpoint = delivered
    page = f"/admin/deployments/deployment/{deployment.pk}/change/"
    deployer = _staff(django_user_model, "deployer", "view_deployment")
    response = deployer.get(page)
    assert response.status_code == 200
    assert SECRET_PATH not in response.content.decode()
    assert f"endpoint #{endpoint.pk} (chat channel)" in response.content.decode()

    operator = _staff(django_user_model, "operator", "view_deployment", "view_endpoint")
    response = operator.get(page)
    assert response.status_code == 200
    assert URL in response.content.decode()


def test_the_delivery_list_names_endpoints_without_their_url(delivered, django_user_model):
    _, _, endpoint = delivered
    viewer = _staff(django_user_model, "viewer", "view_delivery")
    response = viewer.get("/admin/webhooks/delivery/")
    assert response.status_code == 200
    body = response.content.decode()
    assert f"Endpoint {endpoint.pk} (chat channel)" in body  # the endpoint filter's choice
    assert SECRET_PATH not in body


def test_job_and_delivery_pages_name_the_endpoint_without_its_url(delivered, django_user_model):
    # Whoever may view jobs (or deliveries) but not endpoints reads no endpoint URL in a
    # delivery job's owner link or a delivery page's title.
    _, _, endpoint = delivered
    delivery = Delivery.objects.get(endpoint=endpoint)
    pages = {
        "view_job": [
            "/admin/jobs/job/",
            f"/admin/jobs/job/{delivery.job_id}/change/",
        ],
        "view_delivery": [f"/admin/webhooks/delivery/{delivery.pk}/change/"],
    }
    for codename, urls in pages.items():
        client = _staff(django_user_model, codename, codename)
        for url in urls:
            response = client.get(url)
            assert response.status_code == 200, url
            body = response.content.decode()
            assert f"Endpoint {endpoint.pk} (chat channel)" in body, url
            if codename == "view_job":
                assert "/services/" not in body, url
            else:  # the attempts (the receiver's own answer) are the page; the title is not
                assert "/services/" not in body.split("</title>")[0], url
