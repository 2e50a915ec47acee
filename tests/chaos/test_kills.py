"""Scenario 1: pool children and whole workers kill -9'ed at random moments, many times."""

import contextlib
import os
import random
import signal
import time

import pytest

from jobs.maintenance.reaper import reap
from jobs.maintenance.sweeper import sweep
from tests.chaos.conftest import pool_children
from tests.chaos.load import drain, start_load, unfinished, verify

pytestmark = pytest.mark.chaos
JOBS = 5000
CHILD_KILLS = 25
WORKER_KILLS = 4


def test_kill_9_pool_children_and_workers(chaos, receiver, tmp_path, summary):
    workers = [chaos(), chaos()]
    # Bodies long enough that the load outlasts the faults: chunks run quick jobs fast.
    load = start_load(jobs=JOBS, deployments=4, receiver=receiver, tmp_path=tmp_path, sleep=0.015)
    rng = random.Random(20261201)
    children = whole = 0
    while unfinished(load) and (children < CHILD_KILLS or whole < WORKER_KILLS):
        time.sleep(rng.uniform(0.1, 0.4))
        reap()
        sweep()
        if whole < WORKER_KILLS and rng.random() < 0.25:
            victim = workers.pop(rng.randrange(len(workers)))
            victim.kill()  # parent and pool at once: no handler runs, the reaper recovers
            workers.append(chaos())
            whole += 1
            continue
        pids = [pid for worker in workers for pid in pool_children(worker)]
        if pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(pids), signal.SIGKILL)
                children += 1
    faults_done = time.monotonic()
    drained = drain(load, timeout=120)
    verdict = verify(load, receiver, dead_ok={"deployments.run"})
    summary.jobs = len(load.job_ids) + len(load.deployment_ids) + verdict.deliveries
    summary.faults = children + whole
    summary.drain = drained
    summary.note = (
        f"{children} pool children, {whole} workers killed; deployments {verdict.deployments}; "
        f"faults over {faults_done - load.started:.0f}s"
    )
    assert children + whole >= 15, "the run ended before enough faults"
