"""The state machine: one table of moves, enforced by one conditional UPDATE."""

import pytest
from django.db.models import Q
from django.utils import timezone

from jobs.errors import IllegalTransition
from jobs.models import TRANSITIONS, Job, JobStatus
from jobs.transitions import sources_of, transition

S = JobStatus


def make_job(status=S.QUEUED, **fields) -> Job:
    now = timezone.now()
    return Job.objects.create(
        task="jobs.noop", status=status, run_after=now, created_at=now, updated_at=now, **fields
    )


def test_every_status_has_a_row_in_the_table():
    assert set(TRANSITIONS) == set(S.values)


def test_sources_of_running_are_the_waiting_states():
    assert sources_of(S.RUNNING) == {S.QUEUED, S.RETRYING}


def test_naming_an_illegal_source_raises():
    with pytest.raises(IllegalTransition):
        transition(Q(pk=1), S.RUNNING, from_=[S.SUCCEEDED])


def test_a_target_nothing_reaches_raises():
    with pytest.raises(IllegalTransition):
        transition(Q(pk=1), S.QUEUED, from_=[S.SUCCEEDED])


@pytest.mark.django_db
@pytest.mark.parametrize("current", [S.SUCCEEDED, S.DEAD, S.CANCELLED, S.RUNNING])
def test_a_move_from_a_state_that_does_not_allow_it_changes_nothing(current):
    job = make_job(current)
    assert transition(Q(pk=job.pk), S.RUNNING) == []
    job.refresh_from_db()
    assert job.status == current


@pytest.mark.django_db
def test_a_move_returns_the_row_as_updated_and_stamps_times():
    job = make_job(S.QUEUED)
    before = timezone.now()
    (running,) = transition(Q(pk=job.pk), S.RUNNING, locked_by="w/1")
    assert running.status == S.RUNNING and running.locked_by == "w/1"
    assert running.started_at >= before and running.finished_at is None
    assert running.payload == {}  # JSON converted back from the database
    (done,) = transition(Q(pk=job.pk), S.SUCCEEDED, result={"ok": True})
    assert done.finished_at >= running.started_at
    assert done.result == {"ok": True}
    job.refresh_from_db()
    assert job.status == S.SUCCEEDED and job.result == {"ok": True}


@pytest.mark.django_db
def test_only_matching_rows_move():
    waiting = [make_job(S.QUEUED) for _ in range(3)]
    other = make_job(S.RETRYING)
    moved = transition(Q(pk__in=[j.pk for j in waiting]), S.CANCELLED, from_=[S.QUEUED])
    assert sorted(j.pk for j in moved) == sorted(j.pk for j in waiting)
    other.refresh_from_db()
    assert other.status == S.RETRYING
