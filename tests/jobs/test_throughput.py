"""Many workers, many jobs: every job runs exactly once."""

from django.db.models import Count

from jobs import services
from jobs.models import AuditLog, Job, JobStatus
from tests.processes import wait_until

JOBS = 2000


def test_four_workers_drain_2000_jobs_exactly_once(start_worker):
    workers = [start_worker(concurrency=4) for _ in range(4)]
    jobs = services.enqueue_many("tests.record", [{"n": i} for i in range(JOBS)])
    ids = [job.pk for job in jobs]
    assert len(set(ids)) == JOBS

    def drained() -> bool:
        return Job.objects.filter(pk__in=ids, status=JobStatus.SUCCEEDED).count() == JOBS

    wait_until(drained, timeout=600, interval=1, message=f"{JOBS} jobs to succeed")
    runs = AuditLog.objects.filter(action="test.executed", target_id__in=[str(i) for i in ids])
    assert runs.count() == JOBS
    assert not runs.values("target_id").annotate(n=Count("pk")).filter(n__gt=1).exists()
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}
    # Every worker took part (the broker spread the work), as each job's history says.
    ran_on = {
        entry["worker"].split("@", 1)[0]
        for history in Job.objects.filter(pk__in=ids).values_list("attempts_history", flat=True)
        for entry in history
    }
    assert ran_on == {w.name for w in workers}
