"""Celery tasks used by the tests; workers load them with ``--include tests.jobtasks``.

Each execution writes one AuditLog row (``action="test.executed"``) so a test can count how
many times a job body really ran.
"""

import os
import signal
import time
from datetime import timedelta

from celery import shared_task

from jobs import Permanent, Snooze
from jobs.limits import Limit
from jobs.models import AuditLog
from jobs.task import JobContext, JobTask
from jobs.unique import Unique


def record(ctx: JobContext, **details) -> None:
    AuditLog.objects.create(
        actor=f"pid:{os.getpid()}",
        action="test.executed",
        target_type="job",
        target_id=str(ctx.job.pk),
        details={"attempt": ctx.job.attempts, **details},
    )


@shared_task(base=JobTask, name="tests.record")
def record_task(ctx: JobContext):
    """Record one execution after sleeping ``payload["sleep"]`` seconds (the first run only
    when ``payload["first_only"]``: a run handed back at a shutdown spends no attempt, but
    leaves an entry in the history)."""
    first_run = ctx.job.attempts == 1 and not ctx.job.attempts_history
    if first_run or not ctx.payload.get("first_only"):
        time.sleep(float(ctx.payload.get("sleep", 0)))
    record(ctx)
    return {"n": ctx.payload.get("n")}


@shared_task(base=JobTask, name="tests.flaky", retry_backoff=1, retry_backoff_max=1)
def flaky_task(ctx: JobContext):
    """Fail with a retryable error for the first ``payload["fail_runs"]`` executions."""
    record(ctx)
    runs = AuditLog.objects.filter(action="test.executed", target_id=str(ctx.job.pk)).count()
    if runs <= ctx.payload["fail_runs"]:
        raise ConnectionError(f"transient failure on attempt {ctx.job.attempts}")
    return "ok"


@shared_task(base=JobTask, name="tests.permanent")
def permanent_task(ctx: JobContext):
    record(ctx)
    raise Permanent("this can never work")


@shared_task(base=JobTask, name="tests.snooze")
def snooze_task(ctx: JobContext):
    """Snooze once for ``payload["seconds"]``, then succeed."""
    record(ctx)
    if not AuditLog.objects.filter(action="test.snoozed", target_id=str(ctx.job.pk)).exists():
        AuditLog.objects.create(
            actor="test", action="test.snoozed", target_type="job", target_id=str(ctx.job.pk)
        )
        raise Snooze(ctx.payload.get("seconds", 1))
    return "woke"


@shared_task(base=JobTask, name="tests.kill_self")
def kill_self_task(ctx: JobContext):
    """Kill this worker process (the pool child) with SIGKILL, ``payload["times"]`` times."""
    record(ctx)
    if ctx.job.attempts <= ctx.payload.get("times", 1_000_000):
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


@shared_task(base=JobTask, name="tests.wait_for_cancel")
def wait_for_cancel_task(ctx: JobContext):
    """Heartbeat until asked to cancel (or ``payload["timeout"]`` seconds pass)."""
    record(ctx)
    deadline = time.monotonic() + ctx.payload.get("timeout", 60)
    while time.monotonic() < deadline:
        ctx.heartbeat()
        if ctx.cancel_requested:
            return "cancelled"
        time.sleep(0.2)
    return "timed out"


@shared_task(name="tests.add")
def add(x: int, y: int) -> int:
    """A plain Celery task whose result django-celery-results stores."""
    return x + y


SIDE_EFFECTS_TABLE = "test_side_effect"


def create_side_effects_table() -> None:
    """One row per job that ran (unique per job); a second run bumps ``runs`` instead."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {SIDE_EFFECTS_TABLE} "
            "(job_id bigint PRIMARY KEY, runs integer NOT NULL)"
        )


def _side_effect(ctx: JobContext):
    from django.db import connection

    time.sleep(float(ctx.payload.get("sleep", 0)))
    if ctx.payload.get("fail_first") and ctx.job.attempts == 1:
        raise ValueError(f"job {ctx.job.pk} fails its first attempt")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {SIDE_EFFECTS_TABLE} (job_id, runs) VALUES (%s, 1) "
            f"ON CONFLICT (job_id) DO UPDATE SET runs = {SIDE_EFFECTS_TABLE}.runs + 1",
            [ctx.job.pk],
        )
    if ctx.payload.get("die_after_write") and ctx.job.attempts == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # after the write, before the success is recorded
    return ctx.job.pk


@shared_task(base=JobTask, name="tests.side_effect", atomic=True)
def side_effect_task(ctx: JobContext):
    """Sleep ``payload["sleep"]`` seconds, then record the side effect as the body's last act,
    in the transaction that records the success; raise on the first attempt when
    ``payload["fail_first"]``; kill the pool child right after the write (first attempt) when
    ``payload["die_after_write"]``."""
    return _side_effect(ctx)


@shared_task(base=JobTask, name="tests.side_effect_at_least_once")
def side_effect_at_least_once_task(ctx: JobContext):
    """``tests.side_effect`` without ``atomic``: its write commits before the success does."""
    return _side_effect(ctx)


@shared_task(
    base=JobTask,
    name="tests.over_time_limit",
    time_limit=2,
    job_max_attempts=2,
    retry_backoff=1,
    retry_backoff_max=1,
)
def over_time_limit_task(ctx: JobContext):
    """Record the run, then sleep far past the task's 2 s hard time limit."""
    record(ctx)
    time.sleep(60)


@shared_task(
    base=JobTask,
    name="tests.exhaust_memory",
    job_max_attempts=2,
    retry_backoff=1,
    retry_backoff_max=1,
)
def exhaust_memory_task(ctx: JobContext):
    """Record the run, then allocate until the pool child's address space (capped at 64 MiB
    above its size now) is exhausted; the cap is lifted again on the way out."""
    import re
    import resource

    record(ctx)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as proc:
        status = proc.read()
    size = int(re.search(r"VmSize:\s+(\d+) kB", status).group(1)) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + (64 << 20), hard))
    hog = []
    try:
        while True:
            hog.append(bytearray(8 << 20))
    finally:
        hog.clear()
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@shared_task(base=JobTask, name="tests.awkward")
def awkward_task(ctx: JobContext):
    """Fail or return in ways a database or a formatter may choke on (``payload["mode"]``)."""
    mode = ctx.payload["mode"]
    if mode == "nul_error":
        raise ValueError("bad\x00byte")
    if mode == "unprintable":
        raise UnprintableError()
    if mode == "nul_result":
        return {"text": "bad\x00byte"}
    if mode == "not_json":
        return {1, 2}
    if mode == "nan_result":
        return {"x": float("nan")}
    if mode == "surrogate_result":
        return "bad\udcffbyte"
    if mode == "surrogate_error":
        raise ValueError("bad\udcffbyte")
    if mode == "snooze_forever":
        raise Snooze(float("inf"))
    if mode in ("cancel_then_return", "cancel_then_raise"):
        from jobs.services import job_cancel

        job_cancel(ctx.job.pk, actor="operator")  # arrives while the body runs
        if mode == "cancel_then_raise":
            raise ConnectionError("failed after the cancel")
        return "finished anyway"
    return "x" * ctx.payload.get("size", 0)


@shared_task(name="maintenance.tests_broken", ignore_result=True)
def broken_runner(force: bool = False) -> dict:
    """A maintenance runner that always raises, run through jobs.maintenance.runs."""
    from jobs.maintenance import runs

    def explode():
        raise ZeroDivisionError("this runner is broken on purpose")

    return runs.run_task("tests_broken", explode, force=force)


@shared_task(base=JobTask, name="tests.atomic_then_cancelled", atomic=True)
def atomic_then_cancelled_task(ctx: JobContext):
    """Write in the database, then get cancelled (by an operator, on another connection)
    before the body ends: nothing of the body's must remain."""
    import threading

    from django.db import connection

    from jobs.services import job_cancel

    def operator() -> None:
        try:
            job_cancel(ctx.job.pk, actor="operator")
        finally:
            connection.close()

    record(ctx)
    thread = threading.Thread(target=operator)
    thread.start()
    thread.join()
    return "done"


@shared_task(
    base=JobTask,
    name="tests.unique_record",
    unique=Unique(keys=("customer",), period=timedelta(minutes=5)),
)
def unique_record_task(ctx: JobContext):
    """Record one execution; at most one live job per customer in each 5-minute bucket."""
    record(ctx)


def samples():
    """A Redis client for what bodies sample (start order, how many run at once)."""
    import redis

    return redis.Redis.from_url(os.environ["TEST_REDIS_URL"])


@shared_task(base=JobTask, name="tests.stamp")
def stamp_task(ctx: JobContext):
    """Push this job's id onto the Redis list ``payload["key"]`` as its body starts, then
    sleep ``payload["sleep"]`` seconds: the list is the order in which bodies started."""
    samples().rpush(ctx.payload["key"], ctx.job.pk)
    time.sleep(float(ctx.payload.get("sleep", 0)))
    return ctx.job.pk


@shared_task(base=JobTask, name="tests.occupy")
def occupy_task(ctx: JobContext):
    """Raise the Redis counter ``payload["key"]`` while the body runs (``payload["sleep"]``
    seconds) and push each value it reached onto ``<key>:seen``."""
    client = samples()
    key = ctx.payload["key"]
    client.rpush(f"{key}:seen", client.incr(key))
    try:
        time.sleep(float(ctx.payload.get("sleep", 0)))
    finally:
        client.decr(key)
    return ctx.job.pk


def _occupy_keyed(ctx: JobContext):
    """Raise the Redis counters ``<key>`` and ``<key>:<tenant>`` while the body runs, push the
    values they reached onto ``<key>:seen`` / ``<key>:seen:<tenant>``, and push the body's
    start (epoch seconds) onto ``<key>:starts:<tenant>`` and the tenant onto ``<key>:order``."""
    client = samples()
    key, tenant = ctx.payload["key"], ctx.payload["tenant"]
    pipe = client.pipeline()
    pipe.incr(key)
    pipe.incr(f"{key}:{tenant}")
    total, mine = pipe.execute()
    pipe.rpush(f"{key}:seen", total)
    pipe.rpush(f"{key}:seen:{tenant}", mine)
    pipe.rpush(f"{key}:starts:{tenant}", repr(time.time()))
    pipe.rpush(f"{key}:order", tenant)
    pipe.execute()
    try:
        time.sleep(float(ctx.payload.get("sleep", 0)))
    finally:
        pipe.decr(key)
        pipe.decr(f"{key}:{tenant}")
        pipe.execute()
    return ctx.job.pk


@shared_task(
    base=JobTask,
    name="tests.limited",
    limit=Limit(concurrency=2, key=("tenant",), key_concurrency=1),
)
def limited_task(ctx: JobContext):
    """At most 2 at once everywhere, 1 per tenant (see ``_occupy_keyed``)."""
    return _occupy_keyed(ctx)


@shared_task(base=JobTask, name="tests.rated", limit=Limit(key=("tenant",), key_rate="5/s"))
def rated_task(ctx: JobContext):
    """At most 5 starts per tenant in any second (see ``_occupy_keyed``)."""
    return _occupy_keyed(ctx)


@shared_task(base=JobTask, name="tests.task_rated", limit=Limit(rate="10/s"))
def task_rated_task(ctx: JobContext):
    """At most 10 starts in any second, whatever the tenant (see ``_occupy_keyed``)."""
    return _occupy_keyed(ctx)


@shared_task(base=JobTask, name="tests.fair", limit=Limit(key=("tenant",), fair=True))
def fair_task(ctx: JobContext):
    """Tenants served round-robin (see ``_occupy_keyed``)."""
    return _occupy_keyed(ctx)
