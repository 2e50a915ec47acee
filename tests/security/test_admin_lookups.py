"""No admin answers a guess at a secret: every registered admin, walked as view-only staff.

The walk covers every ModelAdmin on the site (Conveyor's and the third-party ones: auth,
django-celery-beat, django-celery-results, axes), so an admin added later is covered too.
Real rows hold real secrets in PostgreSQL; for every secret field reachable from an admin's
model (directly, or through up to two relations), a right and a wrong guess are sent as
list filters, and both must give the same answer. Every action of every admin is then
offered to, and posted by, a user who may only view.
"""

import re
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.core import checks
from django.core.management import call_command
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone
from django_celery_results.models import GroupResult, TaskResult

from deployments.models import Deployment, Environment, Pipeline, Project, Workspace, Worktree
from jobs.models import Notification
from project.access.tokens import token_create
from project.admin_base import ConveyorAdminMixin
from project.secret_fields import lookup_reaches_secret, secrets_of
from tests.webhooks.test_admin import dead_delivery
from webhooks import services as webhook_services
from webhooks.models import Endpoint

pytestmark = pytest.mark.django_db

WEBHOOK_URL = "https://93.184.215.14/services/T0001/B0002/slackish-credential-path"
REPO_URL = "https://deploy:repo-password-4711@git.example.com/acme/app.git"
# Actions that change only the requesting user's own rows (their inbox), by design.
PERSONAL_ACTIONS = {("jobs", "notification", "mark_read")}
MAX_DEPTH = 2


@pytest.fixture
def secrets_everywhere(django_user_model):
    """Rows of every kind the console shows, holding real secrets, linked to each other."""
    owner = django_user_model.objects.create_user("owner", password="owner-pass-93jd8")
    endpoint = webhook_services.endpoint_create(
        url=WEBHOOK_URL, topics=["job.dead"], actor="test", description="team channel"
    )
    dead_delivery(endpoint)
    project = Project.objects.create(
        slug="app", repo=REPO_URL, secrets={"DEPLOY_TOKEN": "tok-9f8e7d6c5b4a"}
    )
    pipeline = Pipeline.objects.create(project=project, name="default")
    Environment.objects.create(project=project, name="production")
    workspace = Workspace.objects.create(project=project, path="/tmp/ws", repo=REPO_URL)
    worktree = Worktree.objects.create(
        workspace=workspace, commit_sha="a" * 40, path="/tmp/wt", last_used_at=timezone.now()
    )
    now = timezone.now()
    Deployment.objects.create(
        project=project,
        environment="production",
        ref="main",
        pipeline=pipeline,
        pipeline_name="default",
        timeout=60,
        worktree=worktree,
        created_at=now,
        updated_at=now,
    )
    token, _ = token_create(name="ci", scope="deploy")
    project.api_tokens.add(token)
    Notification.objects.create(recipient=owner, topic="job.dead", title="dead")
    call_command("setup_periodic_tasks", verbosity=0)
    TaskResult.objects.create(task_id="t-1", task_name="jobs.run", status="SUCCESS")
    GroupResult.objects.create(group_id="g-1")
    AccessAttempt.objects.create(
        username="owner", ip_address="10.0.0.9", user_agent="curl", failures_since_start=1
    )
    return endpoint


@pytest.fixture
def viewer(django_user_model) -> Client:
    """A staff user holding every view permission on the site, and nothing else."""
    user = django_user_model.objects.create_user("viewer", password="viewer-pass-1", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    client = Client()
    client.force_login(user)
    client.user = user
    return client


def _secret_paths(model, prefix: str = "", depth: int = 0):
    """Yield every lookup path from ``model`` to a secret field, through relations."""
    for name in sorted(secrets_of(model)):
        yield f"{prefix}{name}"
    if depth >= MAX_DEPTH:
        return
    for field in model._meta.get_fields():
        if not field.is_relation or field.related_model is None:
            continue
        # A reverse relation's name is the one queries use (its related_query_name).
        yield from _secret_paths(field.related_model, f"{prefix}{field.name}__", depth + 1)


def _right_value(model, path: str):
    """Return (lookup path, a real secret value) reachable from ``model`` by ``path``."""
    for value in model.objects.exclude(**{f"{path}__isnull": True}).values_list(path, flat=True):
        if isinstance(value, dict):  # a JSON map of secrets: guess one entry's value
            for key, item in value.items():
                if isinstance(item, str) and item:
                    return f"{path}__{key}", item
        elif isinstance(value, str) and len(value) >= 8:
            return path, value
    return None


def _guesses(path: str, secret: str):
    """Yield (lookup, right guess, wrong guess) for the usual ways of probing a value."""
    wrong = "~" + secret[1:]
    yield f"{path}__startswith", secret[:8], wrong[:8]
    yield f"{path}__regex", "^" + re.escape(secret[:8]), "^" + re.escape(wrong[:8])
    yield f"{path}__contains", secret[2:10], "~" + secret[3:10]
    yield path, secret, wrong


def _answer(client: Client, url: str, lookup: str, guess: str):
    response = client.get(url, {lookup: guess})
    assert response.status_code != 500, (url, lookup)
    count = None
    if response.status_code == 200 and response.context and "cl" in response.context:
        count = response.context["cl"].result_count
    return response.status_code, response.get("Location", ""), count


def test_every_registered_admin_uses_the_base_class():
    plain = [
        f"{model._meta.label}: {type(model_admin).__qualname__}"
        for model, model_admin in admin.site._registry.items()
        if not isinstance(model_admin, ConveyorAdminMixin)
    ]
    assert plain == []
    errors = [e.id for e in checks.run_checks(tags=[checks.Tags.admin]) if e.level >= checks.ERROR]
    assert errors == []


def test_no_admin_searches_a_secret_field():
    for model, model_admin in admin.site._registry.items():
        for field in model_admin.search_fields or ():
            assert not lookup_reaches_secret(model, str(field)), (model._meta.label, field)


def test_a_right_and_a_wrong_guess_at_a_secret_get_the_same_answer(secrets_everywhere, viewer):
    probed = set()
    for model, _model_admin in admin.site._registry.items():
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for path in set(_secret_paths(model)):
            found = _right_value(model, path)
            if found is None:
                continue
            lookup_path, secret = found
            probed.add(f"{model._meta.label}:{path}")
            for lookup, right, wrong in _guesses(lookup_path, secret):
                assert _answer(viewer, url, lookup, right) == _answer(viewer, url, lookup, wrong), (
                    f"{url}?{lookup}= tells a right guess from a wrong one"
                )
    # The walk did reach the secrets it is about, directly and through relations.
    assert {
        "webhooks.Endpoint:secret",
        "webhooks.Endpoint:url",
        "webhooks.Delivery:endpoint__secret",
        "webhooks.Event:deliveries__endpoint__secret",
        "deployments.Project:secrets",
        "deployments.Project:repo",
        "deployments.Deployment:project__secrets",
        "deployments.Worktree:workspace__repo",
        "access.ApiToken:token_hash",
        "auth.User:password",
        "jobs.Notification:recipient__password",
    } <= probed


def _rows(model) -> list[dict]:
    return list(model._default_manager.order_by("pk").values())


def test_view_only_staff_are_offered_no_action_and_posting_one_changes_nothing(
    secrets_everywhere, viewer
):
    request = RequestFactory().get("/")
    request.user = viewer.user
    for model, model_admin in admin.site._registry.items():
        label = (model._meta.app_label, model._meta.model_name)
        offered = set(model_admin.get_actions(request))
        offered -= {
            name for app, model_name, name in PERSONAL_ACTIONS if (app, model_name) == label
        }
        assert offered == set(), (model._meta.label, offered)
        url = reverse(f"admin:{label[0]}_{label[1]}_changelist")
        pks = [str(pk) for pk in model._default_manager.values_list("pk", flat=True)]
        for _func, name, _description in model_admin._get_base_actions():
            if (*label, name) in PERSONAL_ACTIONS:
                continue
            before = _rows(model)
            response = viewer.post(
                url, {"action": name, "_selected_action": pks, "index": 0, "post": "yes"}
            )
            assert response.status_code != 500, (url, name)
            assert _rows(model) == before, f"{name} on {url} changed rows for a viewer"


def test_beat_actions_run_for_a_user_with_change_permission(secrets_everywhere, django_user_model):
    from django_celery_beat.models import PeriodicTask

    user = django_user_model.objects.create_user("operator", password="op-pass-1", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="django_celery_beat",
            codename__in=["view_periodictask", "change_periodictask"],
        )
    )
    client = Client()
    client.force_login(user)
    task = PeriodicTask.objects.filter(enabled=True).first()
    response = client.post(
        reverse("admin:django_celery_beat_periodictask_changelist"),
        {"action": "disable_tasks", "_selected_action": [task.pk], "index": 0},
    )
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.enabled is False


def test_the_dashboards_links_still_filter(secrets_everywhere, admin_client):
    since = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    response = admin_client.get(
        reverse("admin:jobs_job_changelist"),
        {"status__exact": "dead", "finished_at__gte": since, "queue": "webhooks"},
    )
    assert response.status_code == 200
    assert response.context["cl"].result_count >= 1
    endpoint = Endpoint.objects.get()
    response = admin_client.get(
        reverse("admin:webhooks_delivery_changelist"), {"endpoint__id__exact": endpoint.pk}
    )
    assert response.status_code == 200 and response.context["cl"].result_count == 1


def test_axes_cleanup_runs_for_a_user_with_delete_permission(django_user_model):
    user = django_user_model.objects.create_user("security", password="sec-pass-1", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="axes",
            codename__in=["view_accessattempt", "delete_accessattempt"],
        )
    )
    expired = AccessAttempt.objects.create(
        username="old", ip_address="10.0.0.1", user_agent="curl", failures_since_start=3
    )
    AccessAttempt.objects.filter(pk=expired.pk).update(
        attempt_time=timezone.now() - timedelta(days=2)
    )
    fresh = AccessAttempt.objects.create(
        username="new", ip_address="10.0.0.2", user_agent="curl", failures_since_start=1
    )
    client = Client()
    client.force_login(user)
    response = client.post(
        reverse("admin:axes_accessattempt_changelist"),
        {"action": "cleanup_expired_attempts", "_selected_action": [fresh.pk], "index": 0},
    )
    assert response.status_code == 302
    assert list(AccessAttempt.objects.values_list("username", flat=True)) == ["new"]
