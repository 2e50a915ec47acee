"""The tallies the triggers keep: dead letters and the run-time and wait-time histograms.

Every figure is compared with the table itself, folded and not folded.
"""

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs import services
from jobs.accounting import tallies
from jobs.models import DEAD_LETTER, Job, JobStatus, JobTallyDelta
from tests.console.test_console import client, samples
from tests.processes import wait_until

pytestmark = pytest.mark.django_db
S = JobStatus


def table_dead_letters() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for queue, task in Job.objects.filter(DEAD_LETTER).values_list("queue", "task"):
        found[(queue, task)] = found.get((queue, task), 0) + 1
    return found


def both_ways(read):
    """Read before and after a fold: the two must agree."""
    before = read()
    tallies.fold()
    assert JobTallyDelta.objects.count() == 0
    after = read()
    assert before == after
    return after


def bury(ids, **changes):
    now = timezone.now()
    Job.objects.filter(pk__in=ids).update(status=S.DEAD, started_at=now, finished_at=now, **changes)


def test_dead_letters_follow_every_writer():
    a = services.enqueue_many("tests.record", [{}] * 4)
    b = services.enqueue_many("tests.flaky", [{}] * 3, queue="other")
    assert both_ways(tallies.dead_letters) == {}
    bury([job.pk for job in a[:3]])
    bury([job.pk for job in b])
    assert both_ways(tallies.dead_letters) == table_dead_letters()
    assert tallies.dead_letters_by_queue() == {"default": 3, "other": 3}

    # Superseded (a replay took over), retried by an operator, moved, purged.
    assert services.job_supersede([a[0].pk, a[3].pk, None], actor="test") == 1  # a[3] is queued
    assert services.job_supersede([a[0].pk], actor="test") == 0  # already superseded
    services.job_retry(a[1].pk, actor="test")
    Job.objects.filter(pk=b[0].pk).update(queue="default")
    Job.objects.filter(pk=b[1].pk).delete()
    assert both_ways(tallies.dead_letters) == table_dead_letters()
    assert tallies.dead_letters_by_queue() == {"default": 2, "other": 1}

    # A retried job that dies again is a dead letter again (its retry cleared superseded_at).
    services.job_retry(a[0].pk, actor="test")
    assert Job.objects.get(pk=a[0].pk).superseded_at is None
    bury([a[0].pk])
    assert both_ways(tallies.dead_letters) == table_dead_letters()
    assert tallies.dead_letters_by_queue() == {"default": 3, "other": 1}
    # An insert of a dead row (a restore, a fixture) counts too.
    Job.objects.bulk_create(
        [Job(task="tests.record", status=S.DEAD, run_after=timezone.now(),
             created_at=timezone.now(), updated_at=timezone.now())]
    )  # fmt: skip
    assert both_ways(tallies.dead_letters) == table_dead_letters()


def expected_histogram(pairs) -> dict[tuple[str, str], tallies.Histogram]:
    """Histograms of ``{(queue, task): [seconds, ...]}`` computed here, independently."""
    found = {}
    for key, values in pairs.items():
        histogram = tallies.Histogram()
        for seconds in values:
            for i, bound in enumerate(tallies.BOUNDS):
                if seconds <= bound:
                    histogram.buckets[i] += 1
            histogram.buckets[-1] += 1
            histogram.total += seconds
        found[key] = histogram
    return found


def approx(histograms: dict) -> dict:
    return {key: (h.buckets, pytest.approx(h.total, abs=1e-3)) for key, h in histograms.items()}


def test_histograms_count_each_end_once_exactly_and_never_go_down():
    rng = random.Random(20)
    jobs = services.enqueue_many("tests.record", [{}] * 30) + services.enqueue_many(
        "tests.flaky", [{}] * 10, queue="other"
    )
    now = timezone.now()
    runs: dict[tuple[str, str], list[float]] = {}
    waits: dict[tuple[str, str], list[float]] = {}
    for job in jobs:
        # Times on both sides of the bounds, and exactly on some.
        run = rng.choice([0.001, 0.005, 0.2, 1, 1.0001, 7.5, 30, 4000])
        wait = rng.choice([0, 0.01, 2.5, 2.6, 61])
        started = now - timedelta(hours=2)
        status = rng.choice([S.SUCCEEDED, S.DEAD, S.CANCELLED])
        Job.objects.filter(pk=job.pk).update(status=S.RUNNING, started_at=started)
        Job.objects.filter(pk=job.pk).update(
            status=status,
            run_after=started - timedelta(seconds=wait),
            finished_at=started + timedelta(seconds=run),
        )
        runs.setdefault((job.queue, job.task), []).append(run)
        waits.setdefault((job.queue, job.task), []).append(wait)
    # Ends without a run (cancelled while queued) and writes that end nothing count nothing.
    services.job_cancel(services.enqueue("tests.record", {}).pk, actor="test")
    Job.objects.filter(pk=jobs[0].pk).update(locked_by="someone", updated_at=timezone.now())

    run_time = both_ways(lambda: approx(tallies.histograms(tallies.RUN_TIME)))
    assert run_time == approx(expected_histogram(runs))
    wait_time = both_ways(lambda: approx(tallies.histograms(tallies.WAIT_TIME)))
    assert wait_time == approx(expected_histogram(waits))
    for buckets, _ in run_time.values():
        assert buckets == sorted(buckets)  # cumulative

    # Purging the jobs takes nothing back; a retried job that ends again counts again.
    before = tallies.histograms(tallies.RUN_TIME)
    Job.objects.filter(pk__in=[job.pk for job in jobs[1:]]).delete()
    Job.objects.filter(pk=jobs[0].pk).update(status=S.DEAD)
    services.job_retry(jobs[0].pk, actor="test")
    started = timezone.now()
    Job.objects.filter(pk=jobs[0].pk).update(status=S.RUNNING, started_at=started)
    Job.objects.filter(pk=jobs[0].pk).update(
        status=S.SUCCEEDED, finished_at=started + timedelta(seconds=3)
    )
    after = both_ways(lambda: tallies.histograms(tallies.RUN_TIME))
    key = ("default", "tests.record")
    grown = [b - a for a, b in zip(before[key].buckets, after[key].buckets, strict=True)]
    within = tallies.BOUNDS.index(5)  # 3 s: the first bound it is within is 5 s
    assert grown == [0] * within + [1] * (len(tallies.BOUNDS) + 1 - within)
    assert after[("other", "tests.flaky")].buckets == before[("other", "tests.flaky")].buckets


SQLITE_SCRIPT = """
from datetime import timedelta
from django.utils import timezone
from jobs import services
from jobs.accounting import tallies
from jobs.models import DEAD_LETTER, Job
jobs = services.enqueue_many('jobs.noop', [{}] * 4)
now = timezone.now()
for job, run in zip(jobs, (0.004, 0.3, 2.5, 90)):
    Job.objects.filter(pk=job.pk).update(status='running', started_at=now, run_after=now)
    Job.objects.filter(pk=job.pk).update(status='dead', finished_at=now + timedelta(seconds=run))
services.job_supersede([jobs[0].pk], actor='test')
services.job_retry(jobs[1].pk, actor='test')
Job.objects.filter(pk=jobs[2].pk).delete()
print('before', tallies.dead_letters(), Job.objects.filter(DEAD_LETTER).count())
tallies.fold()
print('after', tallies.dead_letters())
print('runtime', tallies.histograms('run_time')[('default', 'jobs.noop')].buckets)
"""


def test_the_tallies_work_on_the_embedded_sqlite(tmp_path):
    from tests.foundation.test_embedded import embedded_env, manage

    env = embedded_env(tmp_path)
    manage(env, "migrate", "--noinput")
    lines = manage(env, "shell", "-c", SQLITE_SCRIPT).stdout.strip().splitlines()[-3:]
    assert lines[0] == "before {('default', 'jobs.noop'): 1} 1"
    assert lines[1] == "after {('default', 'jobs.noop'): 1}"
    # 4 ms, 300 ms, 2.5 s (on its bound), 90 s, cumulative over tallies.BOUNDS and +Inf.
    expected = [sum(run <= bound for run in (0.004, 0.3, 2.5, 90)) for bound in tallies.BOUNDS]
    assert lines[2] == f"runtime {expected + [4]}"


@pytest.mark.slow
def test_metrics_histograms_match_jobs_run_by_a_real_worker(settings, start_worker):
    """Jobs run, retried and killed by a worker: /metrics' buckets equal the table's times."""
    settings.CONVEYOR_METRICS_ALLOW = "127.0.0.1"
    sleeps = [0, 0, 0.03, 0.3, 0.3, 1.2]
    services.enqueue_many("tests.record", [{"sleep": s} for s in sleeps])
    services.enqueue_many("tests.flaky", [{"fail_runs": 1}] * 2, queue="other")
    services.enqueue_many("tests.permanent", [{}] * 2)
    start_worker(queues="default,other", concurrency=2)
    ended = Job.objects.filter(status__in=[S.SUCCEEDED, S.DEAD])
    wait_until(lambda: ended.count() == len(sleeps) + 4, timeout=60, message="every job to end")

    def scraped() -> dict:
        return samples(client().get("/metrics").content.decode())

    found = scraped()
    for queue, task in set(ended.values_list("queue", "task")):
        rows = Job.objects.filter(queue=queue, task=task)
        runs = [(j.finished_at - j.started_at).total_seconds() for j in rows]
        waits = [(j.started_at - j.run_after).total_seconds() for j in rows]
        pair = (("queue", queue), ("task", task))
        for name, values in (("runtime", runs), ("wait", waits)):
            family = f"conveyor_job_{name}_seconds"
            buckets = []
            for bound in [*tallies.BOUNDS, float("inf")]:
                le = "+Inf" if bound == float("inf") else str(float(bound))
                got = found[(f"{family}_bucket", (("le", le), *pair))]
                assert got == sum(max(v, 0) <= bound for v in values), (family, task, le)
                buckets.append(got)
            assert buckets == sorted(buckets)  # cumulative
            assert found[(f"{family}_count", pair)] == len(values)
            assert found[(f"{family}_sum", pair)] == pytest.approx(
                sum(max(v, 0) for v in values), abs=1e-3
            )
    # A second scrape, after a fold and after the jobs were purged, reads the same.
    tallies.fold()
    Job.objects.filter(status__in=[S.SUCCEEDED, S.DEAD]).delete()
    again = scraped()
    histogram = {k: v for k, v in found.items() if k[0].startswith("conveyor_job_runtime")}
    assert {k: again[k] for k in histogram} == histogram
