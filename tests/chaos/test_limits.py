"""Scenario 8: a body past its hard time limit, and one that exhausts its pool child's memory:
each is retried, then dead with its reason; never acknowledged and forgotten."""

import pytest

from jobs import services
from jobs.models import Job, JobReason, JobStatus
from tests.chaos.load import drain, start_load, verify
from tests.jobs.test_execution import executions
from tests.processes import wait_until

pytestmark = pytest.mark.chaos
S = JobStatus


def test_time_limit_and_memory_exhaustion_end_dead_after_a_retry(chaos, tmp_path, summary):
    chaos(concurrency=2)
    load = start_load(jobs=300, sleep=0.002)
    slow = services.enqueue("tests.over_time_limit", {})
    hog = services.enqueue("tests.exhaust_memory", {})
    drained = drain(load, timeout=90)

    def ended(job: Job) -> bool:
        job.refresh_from_db()
        return job.status == S.DEAD

    wait_until(lambda: ended(slow) and ended(hog), timeout=90, message="both jobs to end dead")
    assert (slow.reason, slow.attempts, executions(slow)) == (JobReason.TIME_LIMIT, 2, 2)
    assert [e["reason"] for e in slow.attempts_history] == ["time_limit", "time_limit"]
    assert slow.attempts_history[0]["error"]["class_path"].endswith("TimeLimitExceeded")
    assert (hog.reason, hog.attempts, executions(hog)) == (JobReason.EXHAUSTED, 2, 2)
    assert [e["error"]["class_path"] for e in hog.attempts_history] == ["builtins.MemoryError"] * 2
    verify(load, dead_ok={"tests.over_time_limit", "tests.exhaust_memory"})
    summary.jobs = len(load.job_ids) + 2
    summary.faults = 4  # two time limits, two exhausted address spaces
    summary.drain = drained
    summary.note = "time_limit: retried then dead; MemoryError: retried then dead (exhausted)"
