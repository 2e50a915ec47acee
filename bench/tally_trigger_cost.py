"""What the tally trigger costs on the job-finish path: before/after timing.

Ends ``JOBS`` running jobs one statement each (``running`` -> ``succeeded`` with
``finished_at``, autocommit, as a worker's end is), with the tally triggers installed and
with them dropped, alternating ``ROUNDS`` times; prints the median time per end of each
(on a shared machine that is noisy: commits dominate). Then ends ``JOBS`` jobs in one UPDATE
under ``EXPLAIN ANALYZE`` and prints each trigger's own time per call, which is not. The
count triggers stay in both: what is measured is what ``jobs 0019`` added. Run against a
database of its own, migrated::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conveyor_bench \\
        .venv/bin/python manage.py migrate --noinput
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conveyor_bench \\
        .venv/bin/python -m bench.tally_trigger_cost

It deletes the jobs it made; the triggers are installed again at the end.
"""

import os
import statistics
import time
from datetime import timedelta

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from jobs.accounting import tallies, triggers  # noqa: E402
from jobs.models import Job, JobStatus  # noqa: E402
from jobs.services import enqueue_many  # noqa: E402

JOBS = int(os.environ.get("BENCH_JOBS", "2000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def end_jobs() -> float:
    """Seconds per end of ``JOBS`` freshly started jobs, one UPDATE each."""
    jobs = enqueue_many("jobs.noop", [{}] * JOBS, queue="bench")
    started = timezone.now() - timedelta(seconds=1)
    ids = [job.pk for job in jobs]
    Job.objects.filter(pk__in=ids).update(status=JobStatus.RUNNING, started_at=started)
    with connection.cursor() as cursor:
        began = time.perf_counter()
        for job_id in ids:
            cursor.execute(
                "UPDATE jobs_job SET status = 'succeeded', finished_at = now(), "
                "updated_at = now() WHERE id = %s AND status = 'running'",
                [job_id],
            )
        elapsed = time.perf_counter() - began
    Job.objects.filter(pk__in=ids).delete()
    return elapsed / JOBS


def trigger_times() -> dict[str, str]:
    """End ``JOBS`` jobs in one statement under EXPLAIN ANALYZE: each trigger's own time."""
    jobs = enqueue_many("jobs.noop", [{}] * JOBS, queue="bench")
    ids = [job.pk for job in jobs]
    started = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk__in=ids).update(status=JobStatus.RUNNING, started_at=started)
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) UPDATE jobs_job SET status = 'succeeded', "
            "finished_at = now() WHERE id = ANY(%s)",
            [ids],
        )
        plan = cursor.fetchone()[0]
    plan = plan[0] if isinstance(plan, list) else plan
    Job.objects.filter(pk__in=ids).delete()
    found = {"statement": f"{plan['Execution Time']:.1f} ms"}
    for trigger in plan.get("Triggers", []):
        per = trigger["Time"] / max(trigger["Calls"], 1) * 1000
        found[trigger["Trigger Name"]] = f"{trigger['Time']:.1f} ms, {per:.1f} µs per call"
    return found


def drop_tally_triggers() -> None:
    with connection.cursor() as cursor:
        for name in triggers.TALLY_TRIGGERS:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON jobs_job")


def main() -> None:
    assert connection.vendor == "postgresql", "measure on PostgreSQL"
    results: dict[str, list[float]] = {"without": [], "with": []}
    try:
        end_jobs()  # warm up
        for _ in range(ROUNDS):
            drop_tally_triggers()
            results["without"].append(end_jobs())
            triggers.install()
            results["with"].append(end_jobs())
    finally:
        triggers.install()
        tallies.fold()
    print(f"one UPDATE ending {JOBS} jobs, under EXPLAIN ANALYZE:")
    for name, spent in trigger_times().items():
        print(f"  {name}: {spent}")
    for name, values in results.items():
        print(
            f"{name} tally triggers: median {statistics.median(values) * 1000:.3f} ms per job end "
            f"({', '.join(f'{v * 1000:.3f}' for v in values)}; {JOBS} ends x {ROUNDS})"
        )


if __name__ == "__main__":
    main()
