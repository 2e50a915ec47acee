"""A run that moves jobs every way they can move, for the accounting tests on both databases.

Used in-process on PostgreSQL and, through ``manage.py shell``, on the embedded SQLite
default. A worker must consume the ``default`` queue; nothing consumes ``nobody``, so jobs
there stay where the scenario leaves them (queued, retrying).
"""

import json
import time
from collections.abc import Callable
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from jobs import services
from jobs.accounting import counts
from jobs.maintenance.reaper import reap
from jobs.models import FINISHED, Job, JobStatus
from jobs.task_names import display_expression

IDLE = "nobody"


def table_counts() -> dict[tuple[str, str, str], int]:
    """Count jobs by queue, task and status the slow way: GROUP BY over jobs_job (a
    django.tasks job under its function path, as the accounting counts it)."""
    rows = (
        Job.objects.values("queue", "status", name=display_expression())
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {(row["queue"], row["name"], row["status"]): row["n"] for row in rows}


def snapshot() -> tuple[dict, dict]:
    """Return (accounting, table) counts read in one snapshot of the database."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return counts.read(), table_counts()


def _wait(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _status(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def run(check: Callable[[], None]) -> None:
    """Drive jobs through retries, deaths, cancels, snoozes, a reaped lease, operator retries,
    bulk enqueue, bulk UPDATE and a purge-style bulk DELETE, calling ``check`` on the way."""
    flaky = [services.enqueue("tests.flaky", {"fail_runs": 2}) for _ in range(3)]
    permanent = [services.enqueue("tests.permanent", {}) for _ in range(2)]
    snoozed = services.enqueue("tests.snooze", {"seconds": 1})
    waiting = services.enqueue("tests.wait_for_cancel", {"timeout": 60})
    later = services.enqueue("tests.record", {}, run_after=timezone.now() + timedelta(hours=1))
    services.enqueue_many("tests.record", [{"n": i} for i in range(30)])
    services.enqueue_many("tests.record", [{"n": i} for i in range(40)], queue=IDLE)
    check()

    # A cancel of a queued job, and of a running one (through its heartbeat).
    services.job_cancel(later.pk, actor="test")
    _wait(lambda: _status(waiting) == JobStatus.RUNNING, "the waiting job to run")
    check()
    services.job_cancel(waiting.pk, actor="test")

    # A run whose worker vanished: claimed by nobody real, its lease expired, reaped.
    ghost = services.enqueue("tests.record", {}, queue=IDLE, max_attempts=2)
    services.job_claim(ghost.pk, worker="ghost@nowhere/1")
    Job.objects.filter(pk=ghost.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=1))
    reap()
    check()

    mine = [*flaky, *permanent, snoozed, waiting]
    _wait(
        lambda: not Job.objects.filter(queue="default").exclude(status__in=FINISHED).exists(),
        "every default-queue job to end",
    )
    check()

    # An operator's retry of a dead job: queued again, dead again.
    services.job_retry(permanent[0].pk, actor="test")
    check()
    _wait(lambda: _status(permanent[0]) == JobStatus.DEAD, "the retried job to die again")

    # Writers that are not the engine's own: a bulk move and a purge-style DELETE (of the
    # record jobs only: the checks below read the others, which may have ended first).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job SET queue = 'moved' WHERE id IN "
            "(SELECT id FROM jobs_job WHERE queue = %s AND status = 'queued' ORDER BY id LIMIT 10)",
            [IDLE],
        )
        cursor.execute(
            "DELETE FROM jobs_job WHERE id IN (SELECT id FROM jobs_job "
            "WHERE status = 'succeeded' AND task = 'tests.record' ORDER BY finished_at LIMIT 20)"
        )
    assert all(_status(job) in FINISHED for job in mine)
    check()


def main() -> None:
    """Run the scenario here (the embedded default) and print what each check saw as JSON."""
    seen = []

    def record() -> None:
        accounting, table = snapshot()
        seen.append({"accounting": _plain(accounting), "table": _plain(table)})

    run(record)
    counts.fold()
    accounting, table = snapshot()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_jobcountdelta")
        deltas_left = cursor.fetchone()[0]
    folded = {"accounting": _plain(accounting), "table": _plain(table), "deltas_left": deltas_left}
    print(json.dumps({"checks": seen, "folded": folded}))


def _plain(found: dict) -> dict:
    return {"/".join(key): n for key, n in sorted(found.items())}
