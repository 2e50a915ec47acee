"""The page's log views answer exactly whom the deployment's page answers."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q
from django.test import Client

from deployments.runner.logwriter import LogWriter
from deployments.runner.masking import SecretMasker
from deployments.services import deployment_create
from deployments.transitions import transition

RAW = b"\x1b[31mred\x1b[0m <b>bold?</b>\n"


def staff(name: str, *codenames: str) -> Client:
    user = get_user_model().objects.create_user(name, password="pw-123456", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_download_and_log_need_the_deployments_view_permission(make_project):
    deployment = deployment_create(project=make_project("shop"), ref="main")
    transition(Q(pk=deployment.pk), "running")
    writer = LogWriter(deployment.pk, SecretMasker([]))
    writer.write(RAW)
    writer.flush(final=True)
    base = f"/admin/deployments/deployment/{deployment.pk}"

    viewer = staff("viewer", "view_deployment")
    assert viewer.get(f"{base}/change/").status_code == 200
    download = viewer.get(f"{base}/log/download/")
    assert download.status_code == 200
    assert download["Content-Type"] == "text/plain; charset=utf-8"
    assert download["Content-Disposition"] == (
        f'attachment; filename="shop-deployment-{deployment.pk}.log"'
    )
    assert b"".join(download.streaming_content) == RAW
    page = viewer.get(f"{base}/log/", {"offset": 0}).json()
    assert page["lines"][0]["c"] == [["ansi-fg1", "red"], ["", " <b>bold?</b>"]]
    assert viewer.get(f"{base}/log/", {"offset": 0, "format": "text"}).json()["text"] == (
        RAW.decode()
    )

    outsider = staff("outsider", "view_project")
    assert outsider.get(f"{base}/change/").status_code in (302, 403)
    assert outsider.get(f"{base}/log/download/").status_code == 403
    assert outsider.get(f"{base}/log/").status_code == 403
    anonymous = Client().get(f"{base}/log/download/")
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
