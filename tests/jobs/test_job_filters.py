"""The Jobs list's payload, error class, owner and time filters (jobs.filters), on PostgreSQL."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from deployments.models import Pipeline, Project, Step
from deployments.services import deployment_create
from jobs import attempts, services
from jobs.filters import parse_payload
from jobs.models import Job, JobStatus
from webhooks import notify
from webhooks import services as webhooks
from webhooks.models import Delivery

pytestmark = pytest.mark.django_db
URL = "/admin/jobs/job/"


@pytest.fixture
def console(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def _ids(client: Client, **params) -> set[int]:
    response = client.get(URL, {**params, "all": ""})
    assert response.status_code == 200, response
    return {job.pk for job in response.context["cl"].result_list}


def _job(payload: dict, **fields) -> Job:
    job = services.enqueue("jobs.noop", payload)
    if fields:
        Job.objects.filter(pk=job.pk).update(**fields)
    return job


def test_parse_payload_reads_json_values_and_paths():
    assert parse_payload("customer.id=42") == (["customer", "id"], 42)
    assert parse_payload("$.customer.id=42") == (["customer", "id"], 42)
    assert parse_payload('region="eu"') == (["region"], "eu")
    assert parse_payload("region=eu") == (["region"], "eu")
    assert parse_payload("a={}") == (["a"], "{}")
    for bad in ("nonsense", "=1", "a..b=1", ".".join("k" * 9) + "=1", "a=" + "x" * 501):
        with pytest.raises(ValueError):
            parse_payload(bad)


def test_payload_filter_by_key_and_by_path(console):
    number = _job({"customer": {"id": 42}, "region": "eu"})
    text = _job({"customer": {"id": "42"}})
    other = _job({"customer": {"id": 43}, "region": "us"})
    flat = _job({"region": "eu"})
    assert _ids(console, payload="customer.id=42") == {number.pk, text.pk}
    assert _ids(console, payload='customer.id="42"') == {text.pk}
    assert _ids(console, payload="customer.id=43") == {other.pk}
    assert _ids(console, payload="region=eu") == {number.pk, flat.pk}
    assert _ids(console, payload="region=eu", status__exact="queued") == {number.pk, flat.pk}
    assert _ids(console, payload="region=mars") == set()
    # A key is a JSON key, never a lookup: this asks for a key named "customer__id__gt".
    assert _ids(console, payload="customer__id__gt=0") == set()
    response = console.get(URL, {"payload": "nonsense"})
    assert response.status_code == 302 and "e=1" in response["Location"]


def test_a_workflow_jobs_members_are_not_searched_but_other_keys_are(console):
    from jobs import workflows

    flow = workflows.chord([("jobs.noop", {"team": "ops"})], ("jobs.noop", {"team": "ops"}))
    member, callback = flow.enqueue().enqueued_jobs
    # As the engine releases a callback: its members' outcomes written into its payload.
    Job.objects.filter(pk=callback.pk).update(
        payload={"team": "ops", "members": {"status": "succeeded"}}
    )
    own = _job({"team": "ops", "members": {"status": "succeeded"}})  # not a workflow's
    assert _ids(console, payload="team=ops") == {member.pk, callback.pk, own.pk}
    assert _ids(console, payload="members.status=succeeded") == {own.pk}


def test_the_payload_filter_is_answered_by_its_index():
    from django.db import connection

    from jobs.filters import payload_filter

    if connection.vendor != "postgresql":
        pytest.skip("the index is PostgreSQL's")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: the index if usable
        plan = payload_filter(Job.objects.all(), "customer.id=42").explain()
    assert "job_payload_search_idx" in plan, plan


def test_the_payload_filter_is_offered_and_counted(console):
    _job({"region": "eu"})
    response = console.get(URL, {"payload": "region=eu"})
    assert response.status_code == 200
    assert response.context["cl"].result_count == 1
    html = response.content.decode()
    assert 'name="payload" value="region=eu"' in html
    assert 'name="error_class"' in html and 'name="owned_by"' in html


def test_error_class_filter_reads_the_last_errors_class(console):
    def error(exc: BaseException) -> str:
        return attempts.describe(attempts.error_info(exc))

    value = _job({}, status=JobStatus.DEAD, last_error=error(ValueError("boom")))
    key = _job({}, status=JobStatus.DEAD, last_error=error(KeyError("k")))
    _job({}, status=JobStatus.DEAD, last_error="ValueErrorish: not the same class")
    assert _ids(console, error_class="ValueError") == {value.pk}
    assert _ids(console, error_class="builtins.KeyError") == {key.pk}
    response = console.get(URL, {"error_class": "x'; --"})
    assert response.status_code == 302 and "e=1" in response["Location"]


def test_owned_by_filter_asks_the_owner(console):
    project = Project.objects.create(slug="app", name="App")
    pipeline = Pipeline.objects.create(project=project, name="default")
    Step.objects.create(pipeline=pipeline, position=1, name="hello", command="echo hello")
    first = deployment_create(project=project, ref="main", triggered_by="ci")
    deployment_create(project=project, ref="main", triggered_by="ci")
    _job({"deployment_id": first.pk})  # not a deployments.run job: not the deployment's
    assert _ids(console, owned_by=f"deployment:{first.pk}") == {first.job_id}
    assert len(_ids(console, owned_by=f"project:{project.pk}")) == 2
    endpoint = webhooks.endpoint_create(
        url="https://93.184.215.14/hook", topics=["job.dead"], actor="t"
    )
    notify("job.dead", {"job_id": 1})
    delivery = Delivery.objects.get(endpoint=endpoint)
    assert _ids(console, owned_by=f"endpoint:{endpoint.pk}") == {delivery.job_id}
    assert _ids(console, owned_by=f"delivery:{delivery.pk}") == {delivery.job_id}
    for bad in ("deployment:x", "planet:3"):
        response = console.get(URL, {"owned_by": bad})
        assert response.status_code == 302 and "e=1" in response["Location"], bad


def test_created_and_finished_between(console):
    now = timezone.now()
    old = _job({}, created_at=now - timedelta(days=3), finished_at=now - timedelta(days=2))
    new = _job({}, finished_at=now - timedelta(hours=1))
    since = (now - timedelta(days=1)).isoformat()
    assert _ids(console, created_at__lt=since) == {old.pk}
    assert _ids(console, finished_at__gte=since) == {new.pk}
    day_before = (now - timedelta(days=4)).isoformat()
    assert _ids(console, finished_at__gte=day_before, finished_at__lt=since) == {old.pk}


def test_a_user_who_may_not_see_jobs_cannot_filter_their_payloads(django_user_model):
    _job({"token": "s3cret-value"})
    user = django_user_model.objects.create_user("other", password="pw-other-1", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_deployment"))
    client = Client()
    client.force_login(user)
    for guess in ("token=s3cret-value", "token=wrong"):
        assert client.get(URL, {"payload": guess}).status_code == 403


def test_the_payload_filter_and_a_bulk_retry_work_on_sqlite(tmp_path):
    """The embedded defaults (SQLite + JSON1): a path comparison instead of containment."""
    from tests.foundation.test_embedded import embedded_env, manage

    env = embedded_env(tmp_path)
    manage(env, "migrate", "--noinput")
    script = (
        "from django.contrib.auth.models import User\n"
        "from jobs import bulk, services\n"
        "from jobs.filters import payload_filter\n"
        "from jobs.models import Job\n"
        "a = services.enqueue('jobs.noop', {'customer': {'id': 42}})\n"
        "b = services.enqueue('jobs.noop', {'customer': {'id': '42'}})\n"
        "c = services.enqueue('jobs.noop', {'customer': {'id': 43}})\n"
        "found = payload_filter(Job.objects.all(), 'customer.id=42')\n"
        "print(sorted(found.values_list('pk', flat=True)) == [a.pk, b.pk])\n"
        "Job.objects.update(status='dead', last_error='ValueError: x')\n"
        "user = User.objects.create_superuser('root', 'root@example.com', 'pw-root-1')\n"
        "op = bulk.bulk_create(action='retry', filters={'payload': ['customer.id=42']}, "
        "user=user)\n"
        "op = bulk.bulk_run(op.pk, pause=0)\n"
        "dead = list(Job.objects.filter(status='dead').values_list('pk', flat=True))\n"
        "print(op.total, op.done, dead == [c.pk])\n"
    )
    output = manage(env, "shell", "-c", script).stdout.splitlines()
    printed = [line for line in output if not line.startswith("{")]  # not the JSON log lines
    assert printed[-2:] == ["True", "2 2 True"]
