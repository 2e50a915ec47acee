"""Freeze windows: cron and dated windows in their time zone; a trigger inside one is refused."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q
from django.utils import timezone

from deployments.errors import EnvironmentFrozen
from deployments.freeze import active_window, parse_window
from deployments.models import Deployment, Environment
from deployments.services import deployment_create, deployment_retry
from deployments.transitions import transition
from jobs.models import AuditLog
from project.access.tokens import token_create
from tests.api.conftest import Api, assert_error


def window(**raw) -> dict:
    errors: list[str] = []
    parsed = parse_window({"name": "w", **raw}, "freeze[0]", errors)
    assert not errors, errors
    return parsed


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_a_cron_window_opens_at_its_local_time_for_its_duration():
    # Fridays 18:00 in Paris (UTC+1 in winter) for 62 hours: Fri 17:00Z to Mon 07:00Z.
    weekend = window(cron="0 18 * * fri", duration="62h", timezone="Europe/Paris")
    assert active_window([weekend], at("2026-11-27T16:59:59+00:00")) is None
    opened = active_window([weekend], at("2026-11-27T17:00:00+00:00"))
    assert opened.opened_at == at("2026-11-27T17:00:00+00:00")
    assert opened.closes_at == at("2026-11-30T07:00:00+00:00")
    assert active_window([weekend], at("2026-11-30T06:59:59+00:00")) is not None
    assert active_window([weekend], at("2026-11-30T07:00:00+00:00")) is None
    assert active_window([weekend], at("2026-12-02T12:00:00+00:00")) is None  # a Wednesday


def test_a_dated_window_includes_its_start_and_excludes_its_end():
    year_end = window(start="2026-12-20 00:00", end="2027-01-04 00:00", timezone="America/New_York")
    assert active_window([year_end], at("2026-12-20T04:59:59+00:00")) is None
    assert active_window([year_end], at("2026-12-20T05:00:00+00:00")).name == "w"
    assert active_window([year_end], at("2027-01-04T04:59:59+00:00")) is not None
    assert active_window([year_end], at("2027-01-04T05:00:00+00:00")) is None


def test_bad_windows_are_named_in_the_errors():
    errors: list[str] = []
    for raw in (
        {"name": "a", "cron": "61 * * * *", "duration": "1h"},
        {"name": "b", "cron": "* * *", "duration": "1h"},
        {"name": "c", "cron": "0 0 * * *", "duration": "40d"},
        {"name": "d", "start": "soon", "end": "later"},
        {"name": "e", "start": "2026-01-02", "end": "2026-01-01"},
        {"name": "f", "cron": "0 0 * * *", "duration": "1h", "timezone": "Mars/Olympus"},
        {"name": "g"},
        {"cron": "0 0 * * *", "duration": "1h"},
    ):
        assert parse_window(raw, "freeze[0]", errors) is None
    assert len(errors) == 8 and all(error.startswith("freeze[0]") for error in errors)


@pytest.fixture
def frozen_shop(make_project):
    project = make_project("shop")
    now = timezone.now()
    Environment.objects.create(
        project=project,
        name="production",
        freeze=[
            window(
                start=(now - timedelta(hours=1)).astimezone(UTC).isoformat(),
                end=(now + timedelta(hours=1)).astimezone(UTC).isoformat(),
            )
            | {"name": "release-freeze"},
            window(start="2020-01-01 00:00", end="2020-01-02 00:00") | {"name": "long-ago"},
        ],
    )
    return project


def test_a_trigger_in_a_freeze_is_refused_and_an_admin_override_passes_audited(
    frozen_shop, project_api, make_api
):
    deployer = project_api("deploy", frozen_shop)
    admin = make_api("admin")
    body = {"ref": "main", "environment": "production"}

    refused = assert_error(deployer.post("/projects/shop/deployments", body), 409)
    assert refused["code"] == "environment_frozen" and "release-freeze" in refused["message"]
    assert refused["details"]["window"] == "release-freeze" and refused["details"]["closes_at"]
    assert_error(admin.post("/projects/shop/deployments", body), 409, "environment_frozen")
    override = {**body, "override_freeze": True}
    assert_error(deployer.post("/projects/shop/deployments", override), 403, "forbidden")
    overrides = AuditLog.objects.filter(action="deployment.freeze_override")
    assert not Deployment.objects.exists() and not overrides.exists()

    passed = admin.post("/projects/shop/deployments", override)
    assert passed.status_code == 201, passed.content
    audit = AuditLog.objects.get(action="deployment.freeze_override")
    assert audit.target_id == str(passed.json()["id"]) and audit.actor == "token:admin-token"
    assert audit.details["window"] == "release-freeze"

    # Other environments of the project are not frozen.
    staging = deployer.post("/projects/shop/deployments", {"ref": "main", "environment": "staging"})
    assert staging.status_code == 201


def test_retries_obey_the_freeze_too(frozen_shop):
    Environment.objects.filter(project=frozen_shop).update(freeze=[])
    deployment = deployment_create(project=frozen_shop, ref="main")
    transition(Q(pk=deployment.pk), "cancelled")  # finished: it may be retried
    Environment.objects.filter(project=frozen_shop).update(
        freeze=[window(cron="* * * * *", duration="1h") | {"name": "always"}]
    )
    with pytest.raises(EnvironmentFrozen, match="always"):
        deployment_retry(deployment_id=deployment.pk)
    retried = deployment_retry(
        deployment_id=deployment.pk, override_freeze=True, triggered_by="ops"
    )
    assert retried.retry_of_id == deployment.pk
    assert AuditLog.objects.filter(action="deployment.freeze_override", actor="ops").exists()


def test_an_approval_releasing_a_deployment_inside_a_freeze_is_refused_until_overridden(
    frozen_shop,
):
    frozen = Environment.objects.get(project=frozen_shop)
    freeze = frozen.freeze
    Environment.objects.filter(pk=frozen.pk).update(freeze=[], protected=True, required_approvals=1)
    waiting = deployment_create(project=frozen_shop, ref="main", triggered_by="ci")
    assert waiting.status == "waiting_approval"
    Environment.objects.filter(pk=frozen.pk).update(freeze=freeze)  # the freeze starts now

    approver = get_user_model().objects.create_user("ann", is_staff=True)
    approver.user_permissions.add(Permission.objects.get(codename="approve_deployment"))
    _, raw = token_create(name="ann", scope="admin", user=approver)
    path = f"/deployments/{waiting.pk}/approve"
    refused = assert_error(Api(raw).post(path), 409, "environment_frozen")
    assert refused["details"]["window"] == "release-freeze"
    held = Deployment.objects.get(pk=waiting.pk)
    assert held.status == "waiting_approval" and held.job_id is None
    assert not held.approvals.exists()  # nothing recorded: it can be approved later

    released = Api(raw).post(path, {"override_freeze": True, "comment": "hotfix"})
    assert released.status_code == 200 and released.json()["status"] == "pending"
    audit = AuditLog.objects.get(action="deployment.freeze_override")
    assert audit.actor == "ann via token:ann" and audit.target_id == str(waiting.pk)
    assert audit.details["window"] == "release-freeze"
