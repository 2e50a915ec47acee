"""Approval gates: waiting holds no lock nor worker; approvals start it, a rejection ends it."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from deployments.approvals import approvals_expire, deployment_approve, deployment_reject
from deployments.environments import Approver
from deployments.errors import AlreadyDecided, ApprovalRefused, NotWaitingApproval
from deployments.models import Deployment, Environment
from deployments.services import deployment_cancel, deployment_create
from jobs.models import AuditLog, Job, Notification
from project.access.tokens import token_create
from tests.api.conftest import Api, assert_error
from tests.deployments.conftest import wait_for
from webhooks.models import Event

pytestmark = pytest.mark.usefixtures("purge_broker")
DONE = ("success", "failed", "cancelled")


@pytest.fixture
def people(transactional_db):
    users = {
        name: get_user_model().objects.create_user(name, is_staff=True)
        for name in ("alice", "bob", "carol", "dave", "erin")
    }
    # Each may approve; alice also deploys (a person's token does only what the person may).
    approve = Permission.objects.get(codename="approve_deployment")
    for user in users.values():
        user.user_permissions.add(approve)
    users["alice"].user_permissions.add(Permission.objects.get(codename="run_deployment"))
    Group.objects.create(name="releasers").user_set.add(users["carol"])
    return users


@pytest.fixture
def shop(make_project, people):
    project = make_project("shop", pipelines={"default": [{"name": "go", "command": "echo go"}]})
    Environment.objects.create(
        project=project,
        name="production",
        protected=True,
        required_approvals=2,
        approver_users=["alice", "bob"],
        approver_groups=["releasers"],
    )
    return project


def approver(people, name: str) -> Approver:
    return Approver(name=name, user=people[name])


def test_two_approvals_start_it_and_a_waiting_deployment_holds_no_lock(shop, people, deploy_worker):
    deploy_worker()
    first = deployment_create(project=shop, ref="main", triggered_by="alice")
    assert first.status == "waiting_approval" and first.job_id is None
    assert not Job.objects.exists()  # no job: nothing for a worker to claim or hold
    requested = Event.objects.get(type="deployment.approval_requested")
    assert requested.data["deployment_id"] == first.pk
    assert requested.data["required_approvals"] == 2
    inboxes = Notification.objects.filter(topic="deployment.approval_requested")
    assert set(inboxes.values_list("recipient__username", flat=True)) == {"alice", "bob", "carol"}

    with pytest.raises(ApprovalRefused, match="cannot approve it"):
        deployment_approve(deployment_id=first.pk, approver=approver(people, "alice"))
    with pytest.raises(ApprovalRefused, match="not an approver"):
        deployment_approve(deployment_id=first.pk, approver=approver(people, "dave"))
    once = deployment_approve(deployment_id=first.pk, approver=approver(people, "bob"))
    assert once.status == "waiting_approval" and once.job_id is None
    with pytest.raises(AlreadyDecided):
        deployment_approve(deployment_id=first.pk, approver=approver(people, "bob"))

    # While the first one waits, a second one to the same environment is approved and runs.
    second = deployment_create(project=shop, ref="main", triggered_by="dave")
    deployment_approve(deployment_id=second.pk, approver=approver(people, "alice"))
    started = deployment_approve(deployment_id=second.pk, approver=approver(people, "carol"))
    assert started.status == "pending" and started.job_id is not None
    assert wait_for(second, *DONE).status == "success"
    assert Deployment.objects.get(pk=first.pk).status == "waiting_approval"

    # The second approval (carol, through her group) starts the first one too.
    started = deployment_approve(
        deployment_id=first.pk, approver=approver(people, "carol"), comment="ship it"
    )
    assert started.status == "pending"
    assert wait_for(first, *DONE).status == "success"
    audited = AuditLog.objects.filter(action="deployment.approved", target_id=str(first.pk))
    assert sorted(audited.values_list("actor", flat=True)) == ["bob", "carol"]
    decisions = Deployment.objects.get(pk=first.pk).approvals.values_list("approver", "decision")
    assert sorted(decisions) == [("bob", "approved"), ("carol", "approved")]


def test_one_rejection_ends_it_and_later_decisions_are_refused(shop, people):
    deployment = deployment_create(project=shop, ref="main", triggered_by="dave")
    deployment_approve(deployment_id=deployment.pk, approver=approver(people, "alice"))
    rejected = deployment_reject(
        deployment_id=deployment.pk, approver=approver(people, "bob"), comment="not today"
    )
    assert (rejected.status, rejected.failure_reason) == ("cancelled", "rejected")
    assert rejected.job_id is None and not Job.objects.exists()
    assert Event.objects.filter(type="deployment.cancelled").count() == 1
    assert AuditLog.objects.get(action="deployment.rejected").details == {"comment": "not today"}
    with pytest.raises(NotWaitingApproval):
        deployment_approve(deployment_id=deployment.pk, approver=approver(people, "carol"))


def test_self_approval_when_the_environment_allows_it(shop, people):
    Environment.objects.filter(project=shop).update(allow_self_approval=True, required_approvals=1)
    deployment = deployment_create(project=shop, ref="main", triggered_by="alice")
    approved = deployment_approve(deployment_id=deployment.pk, approver=approver(people, "alice"))
    assert approved.status == "pending" and approved.job_id is not None


def test_a_waiting_deployment_can_be_cancelled(shop, people):
    deployment = deployment_create(project=shop, ref="main", triggered_by="dave")
    cancelled = deployment_cancel(deployment_id=deployment.pk, actor="dave")
    assert (cancelled.status, cancelled.failure_reason) == ("cancelled", "cancelled")


def test_approvals_expire_after_the_timeout_and_not_before(shop, people, settings):
    settings.CONVEYOR_APPROVAL_TIMEOUT = timedelta(hours=1)
    fresh = deployment_create(project=shop, ref="main", triggered_by="dave")
    stale = deployment_create(project=shop, ref="main", triggered_by="dave")
    late = deployment_create(project=shop, ref="main", triggered_by="dave")
    now = timezone.now()
    Deployment.objects.filter(pk=fresh.pk).update(created_at=now - timedelta(minutes=59))
    Deployment.objects.filter(pk=stale.pk).update(created_at=now - timedelta(minutes=61))
    Deployment.objects.filter(pk=late.pk).update(created_at=now - timedelta(minutes=61))

    assert approvals_expire(now=now - timedelta(minutes=2)) == 0  # both still in time then
    assert approvals_expire(now=now) == 2
    statuses = dict(Deployment.objects.values_list("pk", "status"))
    assert statuses[fresh.pk] == "waiting_approval" and statuses[stale.pk] == "cancelled"
    expired = Deployment.objects.get(pk=stale.pk)
    assert expired.failure_reason == "approval_expired"
    assert AuditLog.objects.filter(action="deployment.approval_expired").count() == 2
    with pytest.raises(NotWaitingApproval):
        deployment_approve(deployment_id=stale.pk, approver=approver(people, "bob"))

    # A decision arriving after the timeout but before the sweep expires it, too.
    Deployment.objects.filter(pk=fresh.pk).update(created_at=now - timedelta(hours=2))
    with pytest.raises(NotWaitingApproval, match="expired"):
        deployment_approve(deployment_id=fresh.pk, approver=approver(people, "bob"))
    assert Deployment.objects.get(pk=fresh.pk).failure_reason == "approval_expired"


def test_the_api_approves_with_admin_tokens_of_their_users(shop, people, make_api):
    def token_of(name: str, scope: str = "admin") -> Api:
        _, raw = token_create(name=f"{name}-{scope}", scope=scope, user=people[name])
        return Api(raw)

    requester = token_of("alice")
    body = requester.post("/projects/shop/deployments", {"ref": "main"}).json()
    assert body["status"] == "waiting_approval" and body["rollback_of"] is None
    path = f"/deployments/{body['id']}"

    assert_error(token_of("bob", "deploy").post(f"{path}/approve"), 403, "forbidden")
    # The token that triggered it (token:alice-admin) is alice's: no self-approval.
    refused = assert_error(requester.post(f"{path}/approve"), 403, "forbidden")
    assert "cannot approve" in refused["message"]
    assert_error(make_api("admin").post(f"{path}/approve"), 403, "forbidden")  # no user
    first = token_of("bob").post(f"{path}/approve", {"comment": "lgtm"})
    assert first.status_code == 200 and first.json()["status"] == "waiting_approval"
    assert_error(token_of("bob").post(f"{path}/approve"), 409, "already_decided")
    second = token_of("carol").post(f"{path}/approve")
    assert second.status_code == 200 and second.json()["status"] == "pending"
    assert_error(token_of("alice").post(f"{path}/reject"), 409, "conflict")
    assert_error(token_of("bob").post("/deployments/999999/approve"), 404, "not_found")
    assert_error(token_of("bob").post(f"{path}/approve", {"note": 1}), 422, "invalid")


def test_a_wait_timer_delays_the_job(make_project, transactional_db):
    project = make_project("timed")
    Environment.objects.create(project=project, name="production", wait_timer=600)
    deployment = deployment_create(project=project, ref="main")
    job = Job.objects.get(pk=deployment.job_id)
    delay = (job.run_after - deployment.created_at).total_seconds()
    assert deployment.status == "pending" and 599 <= delay <= 601
    untimed = deployment_create(project=project, ref="main", environment="staging")
    job = Job.objects.get(pk=untimed.job_id)
    assert job.run_after is None or job.run_after <= untimed.created_at + timedelta(seconds=1)
