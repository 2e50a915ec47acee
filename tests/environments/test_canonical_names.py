"""Environments cannot be sidestepped by spelling, by an undeclared name or by another ref."""

from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone
from django.utils.module_loading import import_string

from deployments.models import Deployment, Environment, EnvironmentLock, Project
from deployments.projects_as_code.apply import apply_document
from deployments.projects_as_code.schema import InvalidDocument
from deployments.services import deployment_create
from tests.api.conftest import assert_error
from tests.deployments.conftest import wait_for

pytestmark = pytest.mark.usefixtures("purge_broker")


def open_window() -> dict:
    now = timezone.now()
    return {
        "name": "code-freeze",
        "start": (now - timedelta(hours=1)).replace(tzinfo=None).isoformat(),
        "end": (now + timedelta(hours=1)).replace(tzinfo=None).isoformat(),
        "timezone": "UTC",
    }


@pytest.fixture
def shop(make_project):
    project = make_project("shop")
    Environment.objects.create(
        project=project, name="production", protected=True, required_approvals=2
    )
    Environment.objects.create(project=project, name="frozen", freeze=[open_window()])
    return project


def test_every_spelling_is_one_environment_with_its_rules_and_its_one_lock(shop, project_api):
    api = project_api("deploy", shop)
    for spelling in ("Production", "PRODUCTION", "production"):
        answer = api.post("/projects/shop/deployments", {"ref": "main", "environment": spelling})
        assert answer.status_code == 201, answer.content
        assert answer.json()["environment"] == "production"
        assert answer.json()["status"] == "waiting_approval"
    for spelling in ("FROZEN", "Frozen"):
        refused = api.post("/projects/shop/deployments", {"ref": "main", "environment": spelling})
        assert_error(refused, 409, "environment_frozen")
    for spelling in ("Staging", "STAGING"):
        api.post("/projects/shop/deployments", {"ref": "main", "environment": spelling})
    stored = set(Deployment.objects.values_list("environment", flat=True))
    assert stored == {"production", "staging"}
    locks = sorted(EnvironmentLock.objects.values_list("environment", flat=True))
    assert locks == ["production", "staging"]  # one lock per environment, whatever spelling

    one = api.get("/projects/shop/environments/PRODUCTION").json()
    assert one["name"] == "production" and len(one["history"]) == 3 and one["protected"]
    dora = api.get("/projects/shop/metrics/dora", environment="Staging").json()
    assert dora["environment"] == "staging" and dora["deployment_frequency"]["deployments"] == 0
    listed = api.get("/projects/shop/deployments", environment="STAGING").json()
    assert len(listed) == 2


def test_a_strict_project_accepts_only_its_declared_environments(shop, project_api):
    Project.objects.filter(pk=shop.pk).update(strict_environments=True)
    api = project_api("deploy", shop)
    refused = api.post("/projects/shop/deployments", {"ref": "main", "environment": "prod"})
    error = assert_error(refused, 422, "invalid")
    assert "frozen, production" in error["message"]
    assert error["details"]["declared"] == ["frozen", "production"]
    accepted = api.post("/projects/shop/deployments", {"ref": "main", "environment": "Production"})
    assert accepted.status_code == 201
    assert not Deployment.objects.exclude(environment="production").exists()


def test_refs_rules_hold_at_trigger_retry_and_rollback(make_project, project_api, deploy_worker):
    project = make_project("web")
    api = project_api("deploy", project)
    deploy_worker()
    old = wait_for(deployment_create(project=project, ref="hotfix/1"), "success")
    current = wait_for(deployment_create(project=project, ref="main"), "success")
    Environment.objects.create(project=project, name="production", refs=["main", "release/*"])

    for ref in ("main", "release/1.2"):
        answer = api.post("/projects/web/deployments", {"ref": ref})
        assert answer.status_code == 201, answer.content
    for ref in ("feature/x", "release/1/2", "mainline"):
        refused = assert_error(
            api.post("/projects/web/deployments", {"ref": ref}), 422, "ref_not_allowed"
        )
        assert "main, release/*" in refused["message"] and refused["details"]["ref"] == ref
    retried = api.post(f"/deployments/{old.pk}/retry")
    assert_error(retried, 422, "ref_not_allowed")
    rollback = api.post("/projects/web/environments/production/rollback", {"deployment_id": old.pk})
    assert_error(rollback, 422, "ref_not_allowed")
    assert api.post(f"/deployments/{current.pk}/retry").status_code == 201
    assert not Deployment.objects.filter(retry_of=old).exists()


def test_projects_as_code_canonicalises_names_and_reads_refs_and_strictness(db):
    document = {
        "projects": [
            {
                "slug": "web",
                "default_environment": "Production",
                "strict_environments": True,
                "environments": [
                    {"name": "Production", "protected": True, "refs": ["main", "release/*"]},
                    {"name": "STAGING"},
                ],
            }
        ]
    }
    apply_document(document)
    project = Project.objects.get(slug="web")
    assert project.default_environment == "production" and project.strict_environments
    rules = dict(Environment.objects.values_list("name", "refs"))
    assert rules == {"production": ["main", "release/*"], "staging": []}
    apply_document(document)  # applied again: the same rows, not new spellings
    assert Environment.objects.count() == 2

    twice = {"slug": "web", "environments": [{"name": "qa"}, {"name": "QA"}]}
    with pytest.raises(InvalidDocument, match="declared twice"):
        apply_document({"projects": [twice]})
    bad = {"slug": "web", "environments": [{"name": "qa", "refs": ["-x", 3]}]}
    with pytest.raises(InvalidDocument, match="refs"):
        apply_document({"projects": [bad]})
    undeclared = {**document["projects"][0], "default_environment": "dev"}
    with pytest.raises(InvalidDocument, match="default_environment"):
        apply_document({"projects": [undeclared]})


def test_the_admin_stores_the_canonical_name_and_sees_a_spelling_as_taken(make_project):
    project = make_project("shop")
    root = get_user_model().objects.create_superuser("root", password="x-123456")
    console = Client()
    console.force_login(root)
    declared = console.post(
        "/admin/deployments/environment/add/", {"project": project.pk, "name": "QA"}
    )
    rules = "/admin/deployments/environment/env/shop/qa/rules/"
    assert declared.status_code == 302 and declared["Location"] == rules
    form = {
        "required_approvals": 0,
        "wait_timer": 0,
        "refs": "main",
        "freeze-TOTAL_FORMS": "0",
        "freeze-INITIAL_FORMS": "0",
    }
    added = console.post(rules.replace("qa", "QA"), form)
    assert added.status_code == 302, added.content.decode()[:2000]
    assert list(Environment.objects.values_list("name", "refs")) == [("qa", ["main"])]
    again = console.post(
        "/admin/deployments/environment/add/", {"project": project.pk, "name": "Qa"}
    )
    assert (
        again.status_code == 200
        and "already has rules for &#x27;qa&#x27;" in again.content.decode()
    )
    assert Environment.objects.count() == 1
    dev = rules.replace("qa", "dev")
    for refs in ("../x", "-x", "main bad!ref"):
        bad = console.post(dev, {**form, "refs": refs})
        assert bad.status_code == 200 and "ref pattern" in bad.content.decode()
    assert Environment.objects.count() == 1


def test_the_data_migration_lowers_names_and_keeps_the_strictest_rules(make_project):
    project = make_project("shop")
    loose = Environment.objects.create(project=project, name="loose", freeze=[open_window()])
    strict = Environment.objects.create(
        project=project, name="strict", protected=True, required_approvals=2
    )
    deployment = deployment_create(project=project, ref="main", environment="other")
    with connection.cursor() as cursor:  # spellings stored before names were canonical
        cursor.execute(
            "UPDATE deployments_environment SET name = %s WHERE id = %s", ["production", loose.pk]
        )
        cursor.execute(
            "UPDATE deployments_environment SET name = %s WHERE id = %s", ["Production", strict.pk]
        )
        cursor.execute(
            "UPDATE deployments_deployment SET environment = %s WHERE id = %s",
            ["PRODUCTION", deployment.pk],
        )
        cursor.execute(
            "INSERT INTO deployments_environmentlock (project_id, environment) VALUES (%s, %s)",
            [project.pk, "Other"],
        )
    migrate = import_string(
        "deployments.migrations.0009_people_and_canonical_environments"
        ".canonicalise_environment_names"
    )
    migrate(apps, None)

    survivor = Environment.objects.get()
    assert survivor.pk == strict.pk and survivor.name == "production"
    assert survivor.required_approvals == 2 and survivor.protected
    assert [window["name"] for window in survivor.freeze] == ["code-freeze"]  # merged in
    assert Deployment.objects.get(pk=deployment.pk).environment == "production"
    assert sorted(EnvironmentLock.objects.values_list("environment", flat=True)) == ["other"]
