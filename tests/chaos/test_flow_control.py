"""Scenario 9: task limits and pauses while workers are kill -9'ed: nothing lost, no limit
exceeded, nothing of a paused task started, and a resume drains it."""

import time
import uuid
from datetime import datetime
from itertools import pairwise

import pytest

from jobs import services, task_states
from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep
from jobs.models import Job, JobStatus
from tests.jobtasks import samples
from tests.processes import wait_until

pytestmark = pytest.mark.chaos
S = JobStatus
TENANTS = "abcdefgh"
KILLS = 3
ENV = {"CONVEYOR_JOB_LEASE_TIMEOUT": "5s"}


def most_at_once(runs: list[tuple]) -> tuple[int, list[tuple]]:
    """The most of ``runs`` (start, end, ...) that overlap at any instant, and those runs."""
    events = sorted(
        [(run[0], 1, index) for index, run in enumerate(runs)]
        + [(run[1], -1, index) for index, run in enumerate(runs)]
    )
    most, busiest, open_now = 0, [], set()
    for _, step, index in events:
        if step == 1:
            open_now.add(index)
        else:
            open_now.discard(index)
        if len(open_now) > most:
            most, busiest = len(open_now), [runs[i] for i in sorted(open_now)]
    return most, busiest


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def attempts(ids: list[int]) -> list[tuple]:
    """Every finished attempt of the jobs: (tenant, started_at, finished_at, job, outcome)."""
    found = []
    for pk, payload, history in Job.objects.filter(pk__in=ids).values_list(
        "pk", "payload", "attempts_history"
    ):
        found += [
            (payload["tenant"], parse(e["started_at"]), parse(e["finished_at"]), pk, e["outcome"])
            for e in history
        ]
    return found


def test_limits_and_a_pause_hold_while_workers_are_killed(chaos, summary):
    key = f"flow:{uuid.uuid4().hex}"
    client = samples()
    task_states.pause("tests.stamp", actor="chaos")
    workers = [chaos(concurrency=2, env=ENV, queues="default") for _ in range(3)]
    # At least 16 s of work at 2 at once: time for three kills even where a new worker
    # takes seconds to start.
    limited = services.enqueue_many(
        "tests.limited", [{"key": key, "tenant": t, "sleep": 0.5} for t in TENANTS * 8]
    )
    stamps = f"{key}:paused"
    paused = services.enqueue_many("tests.stamp", [{"key": stamps}] * 20)
    ids = [job.pk for job in limited]
    killed = 0
    deadline = time.monotonic() + 180
    while Job.objects.filter(pk__in=ids, status=S.SUCCEEDED).count() < len(ids):
        assert time.monotonic() < deadline, "the limited jobs did not all finish"
        running = Job.objects.filter(pk__in=ids, status=S.RUNNING).values_list("locked_by")
        holders = {owner.split("@")[0] for (owner,) in running}
        victim = next((w for w in workers if w.name in holders), None)
        if killed < KILLS and victim is not None:
            victim.kill()  # kill -9 of a worker holding slots, and of its pool
            workers.remove(victim)
            workers.append(chaos(concurrency=2, env=ENV, queues="default"))
            killed += 1
        reap()  # as beat would: lost runs end and their slots come back
        sweep()
        time.sleep(0.5)
    assert killed == KILLS
    runs = attempts(ids)
    most, busiest = most_at_once([run[1:] for run in runs])
    assert most <= 2, f"{most} at once: {busiest}"
    for tenant in TENANTS:
        mine = sorted(run[1:3] for run in runs if run[0] == tenant)
        assert all(end <= start for (_, end), (start, _) in pairwise(mine)), tenant
    assert client.llen(stamps) == 0  # nothing of the paused task ran, across every restart
    held = Job.objects.filter(pk__in=[j.pk for j in paused]).values_list("status", "attempts")
    assert set(held) == {(S.QUEUED, 0)}
    task_states.resume("tests.stamp", actor="chaos")
    wait_until(lambda: client.llen(stamps) == 20, timeout=60, message="the resumed task to drain")
    summary.jobs = len(ids) + len(paused)
    summary.faults = KILLS
    summary.note = "task limit 2 and 1 per key held (from each attempt's times); pause held"
