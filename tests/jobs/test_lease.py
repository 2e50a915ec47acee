"""jobs.lease: one keeper per process renews every running job's lease in one UPDATE."""

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.lease import LeaseKeeper, keeper
from jobs.models import Job
from jobs.task import JobContext

pytestmark = pytest.mark.django_db


def running(worker: str = "node/1") -> JobContext:
    job = services.enqueue("tests.record", {})
    claimed = services.job_claim(job.pk, worker=worker)
    assert claimed is not None
    soon = timezone.now() + timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(lease_expires_at=soon)
    claimed.lease_expires_at = soon
    return JobContext(job=claimed)


def lease_of(ctx: JobContext):
    return Job.objects.values_list("lease_expires_at", flat=True).get(pk=ctx.job.pk)


def test_a_renewal_extends_every_tracked_lease_and_flags_cancels_and_lost_runs(settings):
    settings.CONVEYOR_JOB_LEASE_TIMEOUT = timedelta(minutes=5)
    lease = LeaseKeeper()
    kept, cancelled, taken = running("node/1"), running("node/2"), running("node/1")
    for ctx in (kept, cancelled, taken):
        lease.track(ctx)
    Job.objects.filter(pk=cancelled.job.pk).update(cancel_requested_at=timezone.now())
    Job.objects.filter(pk=taken.job.pk).update(locked_by="node/9")  # the reaper got there
    before = timezone.now()
    lease.renew()
    assert lease_of(kept) > before + timedelta(minutes=4)
    assert lease_of(cancelled) > before + timedelta(minutes=4)
    assert lease_of(taken) < before + timedelta(seconds=2)  # not this worker's any more
    assert (kept.cancel_requested, kept.lost) == (False, False)
    assert (cancelled.cancel_requested, cancelled.lost) == (True, False)
    assert (taken.cancel_requested, taken.lost) == (False, True)


def test_untrack_forgets_only_the_context_it_is_given():
    lease = LeaseKeeper()
    ctx = running()
    lease.track(ctx)
    lease.untrack(JobContext(job=ctx.job))  # another run of the same job (a re-claim)
    assert lease.runs == {ctx.job.pk: ctx}
    lease.untrack(ctx)
    assert lease.runs == {}
    lease.renew()  # nothing tracked: no statement, no error
    assert lease_of(ctx) < timezone.now() + timedelta(seconds=2)


def test_one_keeper_per_process_and_a_new_one_after_a_fork(monkeypatch):
    from jobs import lease

    first = keeper()
    assert keeper() is first and first.thread.is_alive() and first.thread.daemon
    monkeypatch.setitem(lease._keeper, "pid", os.getpid() + 1)  # as a forked child sees it
    second = keeper()
    assert second is not first and keeper() is second
