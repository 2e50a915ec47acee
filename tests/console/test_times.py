"""One time format on every console page: local 24 h with seconds, UTC in the title."""

from datetime import UTC, datetime

from django.db.models import Q
from django.template import Context, Template

from deployments.models import Deployment
from deployments.services import deployment_create
from deployments.transitions import transition
from project import times

AT = datetime(2026, 12, 3, 13, 5, 9, tzinfo=UTC)
SHOWN = (
    '<time datetime="2026-12-03T13:05:09Z" title="2026-12-03 13:05:09 UTC">'
    "2026-12-03 14:05:09</time>"
)


def test_the_filter_and_the_helper_show_the_operator_zone_with_utc_on_hover(settings):
    settings.TIME_ZONE = "Europe/Paris"
    assert times.moment(AT) == SHOWN
    rendered = Template("{% load console_time %}{{ at|moment }}|{{ none|moment }}|{{ s|moment }}")
    assert rendered.render(Context({"at": AT, "none": None, "s": "text"})) == f"{SHOWN}|—|text"
    settings.TIME_ZONE = "UTC"
    assert ">2026-12-03 13:05:09</time>" in times.moment(AT)


def test_admin_lists_and_a_deployment_page_show_times_one_way(admin_client, make_project, settings):
    settings.TIME_ZONE = "Europe/Paris"
    deployment = deployment_create(project=make_project("shop"), ref="main", triggered_by="ci")
    transition(Q(pk=deployment.pk), "pending")
    Deployment.objects.filter(pk=deployment.pk).update(created_at=AT)
    listing = admin_client.get("/admin/deployments/deployment/").content.decode()
    assert f'<td class="field-created_at_moment">{SHOWN}</td>' in listing
    page = admin_client.get(f"/admin/deployments/deployment/{deployment.pk}/change/")
    assert f"<span>created</span>{SHOWN}" in page.content.decode()
