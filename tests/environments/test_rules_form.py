"""The console's rules form: what it refuses (on the form, never a 500) and who may use it."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from deployments.models import Environment
from deployments.services import deployment_create
from jobs.models import AuditLog

RULES = "/admin/deployments/environment/env/shop/production/rules/"
EMPTY_ROWS = {"freeze-TOTAL_FORMS": "2", "freeze-INITIAL_FORMS": "0"}


@pytest.fixture
def shop(make_project):
    project = make_project("shop")
    Environment.objects.create(project=project, name="production", approver_users=["ghost"])
    return project


def form(**fields) -> dict:
    return {"required_approvals": "0", "wait_timer": "0", "refs": "", **EMPTY_ROWS, **fields}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"required_approvals": "abc"}, "Enter a whole number."),
        ({"protected": "on", "required_approvals": "0"}, "needs at least 1"),
        ({"required_approvals": "2"}, "only a protected environment needs approvals"),
        ({"protected": "on", "required_approvals": "11"}, "less than or equal to 10"),
        ({"approver_users": ["nobody"]}, "Select a valid choice."),
        ({"refs": "main ../etc"}, "is not a ref pattern"),
        ({"freeze-0-name": "w", "freeze-0-cron": "0 18 * *", "freeze-0-duration": "1h"}, "cron"),
        ({"freeze-0-name": "w", "freeze-0-cron": "0 18 * * fri"}, "duration: required"),
        ({"freeze-0-name": "w", "freeze-0-start": "soon", "freeze-0-end": "later"}, "start"),
        ({"freeze-0-name": "w", "freeze-0-timezone": "Mars/Olympus"}, "not a known time zone"),
        ({"freeze-TOTAL_FORMS": "x"}, "ManagementForm data is missing or has been tampered"),
    ],
)
def test_a_bad_value_is_refused_on_the_form_and_nothing_is_stored(
    admin_client, shop, fields, message
):
    response = admin_client.post(RULES, form(**fields))
    assert response.status_code == 200
    body = response.content.decode()
    assert "Please correct the errors below." in body and message in body, body[-3000:]
    rules = Environment.objects.get(project=shop)
    assert (rules.approver_users, rules.freeze, rules.required_approvals) == (["ghost"], [], 0)
    assert not AuditLog.objects.filter(action="environment.rules_changed").exists()


def test_a_name_the_rules_list_stays_a_choice_and_a_blank_row_adds_nothing(admin_client, shop):
    response = admin_client.post(RULES, form(approver_users=["ghost", "admin"]))
    assert response.status_code == 302
    rules = Environment.objects.get(project=shop)
    assert (rules.approver_users, rules.freeze) == (["admin", "ghost"], [])


def test_saving_and_adding_rules_need_their_permissions(client, shop):
    deployment_create(project=shop, ref="main", environment="staging", triggered_by="ci")
    user = get_user_model().objects.create_user("viewer", password="pw-123456", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_environment"))
    client.force_login(user)
    assert client.get(RULES).status_code == 403
    assert client.post(RULES, form(approver_users=["viewer"])).status_code == 403
    staging = RULES.replace("production", "staging")
    user.user_permissions.add(Permission.objects.get(codename="change_environment"))
    client.force_login(get_user_model().objects.get(pk=user.pk))
    assert client.post(RULES, form()).status_code == 302  # a ruled one: change
    assert client.post(staging, form()).status_code == 403  # its first rules: add
    assert not Environment.objects.filter(name="staging").exists()
    user.user_permissions.add(Permission.objects.get(codename="add_environment"))
    client.force_login(get_user_model().objects.get(pk=user.pk))
    assert client.post(staging, form(wait_timer="30")).status_code == 302
    assert Environment.objects.get(name="staging").wait_timer == 30
    # An environment that neither has rules nor was deployed to has no page (only a rules
    # form, for whoever may give it its first rules), nor does a name that is none.
    assert client.get(RULES.replace("production/rules", "nowhere")).status_code == 404
    assert client.get(RULES.replace("production", "nowhere")).status_code == 200
    assert client.get(RULES.replace("production", "no!where")).status_code == 404
