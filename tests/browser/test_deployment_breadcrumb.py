"""The deployment page's breadcrumb shows the deployment's status and follows it live."""

from deployments.models import Deployment, DeploymentStatus
from deployments.services import deployment_cancel, deployment_create
from tests.browser.test_console import mark_page, not_reloaded
from tests.browser.waiting import wait_for_js

STATUS = "document.querySelector('.breadcrumbs #breadcrumb-status').textContent.trim()"


def test_the_breadcrumb_status_follows_the_page_refresh(admin_page, make_project):
    deployment = deployment_create(project=make_project(), ref="main", triggered_by="ci-bot")
    assert deployment.status == DeploymentStatus.PENDING  # no worker: it stays pending
    page = admin_page
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    crumbs = page.locator(".breadcrumbs").inner_text()
    assert f"Deployment {deployment.pk} (production@main) [pending]" in crumbs
    links = page.locator(".breadcrumbs a").evaluate_all("links => links.map(a => a.pathname)")
    assert links == ["/admin/", "/admin/deployments/", "/admin/deployments/deployment/"]
    mark_page(page)
    deployment_cancel(deployment_id=deployment.pk, actor="test")
    assert Deployment.objects.get(pk=deployment.pk).status == DeploymentStatus.CANCELLED
    wait_for_js(page, f"{STATUS} === 'cancelled'")
    # The same refresh moved the summary's status: the two never disagree.
    assert page.locator("#deployment-status").inner_text().strip() == "cancelled"
    assert not_reloaded(page)
