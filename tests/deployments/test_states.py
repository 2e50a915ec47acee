"""The deployment state machine: one table of moves, one conditional UPDATE, times stamped."""

import pytest
from django.db.models import Q

from deployments.models import FINISHED, TRANSITIONS, DeploymentStatus
from deployments.services import deployment_create
from deployments.transitions import sources_of, transition
from jobs.errors import IllegalTransition

S = DeploymentStatus


def test_every_status_has_a_row_and_final_states_lead_nowhere():
    assert set(TRANSITIONS) == set(S.values)
    assert all(not TRANSITIONS[status] for status in FINISHED)
    assert sources_of(S.RUNNING) == {S.PENDING}
    assert sources_of(S.CANCELLING) == {S.RUNNING}
    # Only an approval moves a deployment to pending; nothing moves one back to waiting.
    assert sources_of(S.PENDING) == {S.WAITING_APPROVAL}
    assert sources_of(S.WAITING_APPROVAL) == set()


def test_naming_an_illegal_source_raises():
    with pytest.raises(IllegalTransition):
        transition(Q(pk=1), S.RUNNING, from_=[S.CANCELLED])
    with pytest.raises(IllegalTransition):
        transition(Q(pk=1), S.PENDING, from_=[S.RUNNING])
    with pytest.raises(IllegalTransition):
        transition(Q(pk=1), S.WAITING_APPROVAL)


@pytest.mark.django_db
def test_moves_stamp_their_times_and_illegal_ones_change_nothing(make_project):
    deployment = deployment_create(project=make_project(), ref="main")
    assert transition(Q(pk=deployment.pk), S.SUCCESS) == []  # pending cannot succeed
    (running,) = transition(Q(pk=deployment.pk), S.RUNNING)
    assert running.started_at is not None and running.finished_at is None
    (cancelling,) = transition(Q(pk=deployment.pk), S.CANCELLING)
    assert cancelling.cancel_requested_at >= running.started_at
    (cancelled,) = transition(Q(pk=deployment.pk), S.CANCELLED)
    assert cancelled.finished_at >= cancelling.cancel_requested_at
    assert transition(Q(pk=deployment.pk), S.RUNNING) == []
    deployment.refresh_from_db()
    assert deployment.status == S.CANCELLED
