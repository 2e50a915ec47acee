"""The console's way around the admin: the Console section, the sidebar, the favicon."""

import re

import pytest
from django.contrib.auth.models import Permission
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db

DASHBOARD_LINK = '<a href="/admin/dashboard/"'


def client(user=None) -> Client:
    c = Client(HTTP_HOST="127.0.0.1")
    if user is not None:
        c.force_login(user)
    return c


def sidebar(page: str) -> str:
    found = re.search(r'<nav class="sticky" id="nav-sidebar".*?</nav>', page, re.S)
    assert found, "the page has no sidebar"
    return found.group(0)


@pytest.fixture
def viewer(django_user_model):
    """A staff user who may see deployments but not jobs (so not the dashboard)."""
    user = django_user_model.objects.create_user("viewer", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_deployment"))
    return user


def test_the_index_leads_with_the_console_section(admin_client):
    page = admin_client.get("/admin/", HTTP_HOST="127.0.0.1").content.decode()
    console = page.index('class="app-console module')
    assert console < page.index('class="app-deployments module')
    section = page[console : page.index("</table>", console)]
    assert DASHBOARD_LINK in section and ">Dashboard</a>" in section
    # A page, not a model: "View", never "Change" or "Add".
    assert "viewlink" in section and "changelink" not in section and "addlink" not in section


def test_the_sidebar_lists_the_dashboard_and_marks_it_current_there(admin_client):
    page = admin_client.get("/admin/dashboard/", HTTP_HOST="127.0.0.1").content.decode()
    nav = sidebar(page)
    assert f'{DASHBOARD_LINK} aria-current="page">Dashboard</a>' in nav
    assert re.search(r'class="app-console module current-app"', nav)
    # The plumbing section is not "current" on a page that is not one of its own.
    assert re.search(r'class="app-django_celery_beat module"', nav)
    page = admin_client.get("/admin/jobs/job/", HTTP_HOST="127.0.0.1").content.decode()
    nav = sidebar(page)
    assert DASHBOARD_LINK in nav and 'aria-current="page">Dashboard' not in nav
    assert 'class="app-console module current-app"' not in nav


def test_who_may_not_see_the_dashboard_is_not_shown_it(viewer):
    c = client(viewer)
    assert c.get("/admin/dashboard/").status_code == 403
    index = c.get("/admin/").content.decode()
    assert "Deployments" in index
    assert "app-console" not in index and DASHBOARD_LINK not in index
    nav = sidebar(c.get("/admin/deployments/deployment/").content.decode())
    assert "app-deployments" in nav
    assert "app-console" not in nav and DASHBOARD_LINK not in nav
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    c = client(viewer)
    assert c.get("/admin/dashboard/").status_code == 200
    assert DASHBOARD_LINK in c.get("/admin/").content.decode()


def test_favicon_ico_leads_to_the_static_icon():
    response = client().get("/favicon.ico")
    assert response.status_code == 302
    assert response.headers["Location"] == "/static/console/favicon.ico"
    icon = client().get(response.headers["Location"])
    assert icon.status_code == 200
    assert b"".join(icon.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an ICO header
    assert finders.find("console/favicon.svg")


@pytest.mark.parametrize(
    "url", ["/admin/login/", "/admin/", "/admin/dashboard/", "/admin/jobs/job/", "/api/v1/docs"]
)
def test_pages_link_the_console_icon(admin_client, url):
    if url == "/admin/login/":
        admin_client.logout()
    page = admin_client.get(url, HTTP_HOST="127.0.0.1").content.decode()
    head = page[: page.index("</head>")]
    assert '<link rel="icon" href="/static/console/favicon.svg" type="image/svg+xml">' in head
    assert 'href="/static/console/favicon.ico"' in head
    assert "ninja/favicon" not in head
