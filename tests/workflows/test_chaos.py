"""A 1,000-member group with a callback while pool children and whole workers are kill -9'ed.

Every member runs (atomic members exactly once), the callback is released and runs exactly
once with every member's outcome, and no dependant starts before its dependencies ended.
"""

import contextlib
import os
import random
import signal
import time
from datetime import timedelta

import pytest

from jobs import workflows
from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep
from jobs.models import AuditLog, Job, JobStatus
from tests.chaos.conftest import pool_children
from tests.chaos.load import WORKER_ENV
from tests.workflows.conftest import INCLUDE, assert_order, enqueue

pytestmark = pytest.mark.chaos
S = JobStatus
MEMBERS = 1000
CHILD_KILLS = 12
WORKER_KILLS = 2


def test_kill_9_during_a_1000_member_group_with_a_callback(settings, start_worker):
    settings.CONVEYOR_SWEEPER_GRACE = timedelta(seconds=1)

    def worker():
        return start_worker(queues="default", concurrency=2, include=INCLUDE, env=WORKER_ENV)

    members = [
        ("tests.wf.atomic" if n % 2 else "tests.wf.add", {"n": n, "sleep": 0.02})
        for n in range(MEMBERS)
    ]
    flow = enqueue(workflows.chord(members, ("tests.wf.collect_atomic", {})))
    ids = list(Job.objects.filter(workflow=flow).order_by("id").values_list("id", flat=True))
    callback_id = ids[-1]
    workers = [worker(), worker()]
    rng = random.Random(20261204)
    children = whole = 0

    def unfinished() -> int:
        return Job.objects.filter(workflow=flow).exclude(status__in=list(_FINAL)).count()

    started = time.monotonic()
    while unfinished() and time.monotonic() - started < 150:
        time.sleep(rng.uniform(0.15, 0.4))
        reap()
        sweep()
        if children >= CHILD_KILLS and whole >= WORKER_KILLS:
            continue
        if whole < WORKER_KILLS and rng.random() < 0.2:
            victim = workers.pop(rng.randrange(len(workers)))
            victim.kill()
            workers.append(worker())
            whole += 1
            continue
        pids = [pid for each in workers for pid in pool_children(each)]
        if pids and children < CHILD_KILLS:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(pids), signal.SIGKILL)
                children += 1
    assert not unfinished(), f"{unfinished()} jobs unfinished after the faults"
    assert children + whole >= 5, "the run ended before enough faults"

    jobs = {job.pk: job for job in Job.objects.filter(workflow=flow)}
    callback = jobs[callback_id]
    assert callback.status == S.SUCCEEDED
    ran = AuditLog.objects.filter(target_id__in=[str(i) for i in ids])
    callbacks = ran.filter(action="wf.callback")
    assert callbacks.count() == 1  # atomic: the one committed run
    assert len(callback.payload["members"]) == MEMBERS
    assert [m["job_id"] for m in callback.payload["members"]] == ids[:-1]
    runs: dict[str, int] = {}
    for target in ran.filter(action="wf.ran").values_list("target_id", flat=True):
        runs[target] = runs.get(target, 0) + 1
    for job_id in ids[:-1]:
        job = jobs[job_id]
        member = callback.payload["members"][ids.index(job_id)]
        assert member["status"] == job.status
        if job.status == S.SUCCEEDED:
            assert runs.get(str(job_id), 0) >= 1, job
            if job.task == "tests.wf.atomic":
                assert runs[str(job_id)] == 1, job  # exactly once where atomic
        else:  # a member killed on every attempt: dead, and the callback saw it so
            assert job.status == S.DEAD, job
    assert_order(flow)
    print(
        f"workflow chaos: {MEMBERS} members, {children} pool children and {whole} workers "
        f"killed, {sum(1 for j in jobs.values() if j.status == S.DEAD)} dead, "
        f"{time.monotonic() - started:.0f}s"
    )


_FINAL = (S.SUCCEEDED, S.DEAD, S.CANCELLED)
