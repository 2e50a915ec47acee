"""Scale: each operator read and maintenance run at 0, 1 million and 10 million jobs.

In a database of its own (``BENCH_SCALE_DATABASE_URL``, default the benchmark database's
name + ``_scale``, e.g. ``conveyor_bench_scale``), for each size (0, 1M, 10M; ``BENCH_QUICK=1``
stops at 1M; ``BENCH_SCALE_SIZES=0,200000`` picks others) the job table is emptied and
rebuilt with ``generate_series`` in one INSERT … SELECT: 92% ``succeeded`` spread over 30
days, 2% ``dead`` with three-attempt histories (within the 30-day dead retention), 5%
``queued`` (due, published within the sweeper's spacing), 1% ``retrying`` (due within 26
minutes: inside the 30-minute publish horizon, so published with their countdown when they
were retried; a job scheduled further out is published by the sweeper when it crosses into
the horizon, work per scheduled job rather than per row held), over 4 queues and 8 tasks,
plus 300 ``running`` rows; one webhook delivery (and its event) per 200 jobs and one
deployment per 1,000, built with ``bulk_create``. Then ``VACUUM ANALYZE`` and a
``CHECKPOINT`` (the build's writes are flushed then, not by the checkpointer while the
reads are timed), and, each the median of 5 after one warm-up:

* through Django's test ``Client`` (an admin-scope token for the API and ``/metrics``, a
  logged-in superuser for the console): ``GET /api/v1/queue``, ``GET /metrics``,
  ``/admin/dashboard/`` and its refresh (the console's ``dashboard…`` URL other than the page
  itself if it has one, else the page again, which is what the refresh fetches), the Jobs
  changelist unfiltered and filtered by status (``dead``), queue and task, and one job's
  change page;
* in-process: one sweeper run (``sweep()``, steady state: nothing due to re-send), the claim
  (``jobs.statements.claim`` of one of 200 freshly queued rows, median of 100 prepared and of
  100 sent as text, alternating: jobs.prepared) and pickup
  (``services.enqueue`` commit → the job body's start in a real worker, median of 20);
* the purge (last, at each non-empty size): the completed retention is set so that the
  oldest ``min(1,000,000, half the succeeded rows)`` succeeded rows are expired, and
  ``jobs.maintenance.purge.purge()`` runs, stopped (``pg_cancel_backend``) after
  ``BENCH_SCALE_PURGE_BUDGET`` seconds (300). Reported: rows deleted per second and the
  longest statement, read from PostgreSQL's own log (``log_min_duration_statement = 0`` set
  for the purge's session only, the log read with ``pg_read_file``; the client-side longest
  statement is reported too, and alone when the server log cannot be read).

Prints the table (read | each size | largest/0) and writes ``bench/results/scale.json``.
The database stays when the run ends; with ``BENCH_SCALE_KEEP=1`` the last size skips its
purge, so the table is left as built, to profile a read against (e.g. the Jobs changelist
under cProfile in ``manage.py shell`` with ``DATABASE_URL`` set to it).
"""

import contextlib
import os
import re
import statistics
import threading
import time
import uuid
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

from bench import harness

SIZES = [int(s) for s in os.environ.get("BENCH_SCALE_SIZES", "").split(",") if s.strip()] or (
    [0, 1_000_000] if harness.QUICK else [0, 1_000_000, 10_000_000]
)
REPEATS = 5
CLAIMS = 200
PICKUPS = 20
RUNNING_ROWS = 300
PURGE_ROWS = 1_000_000
PURGE_BUDGET_S = float(os.environ.get("BENCH_SCALE_PURGE_BUDGET") or 300)
QUEUES = ("default", "deployments", "webhooks", "maintenance")
TASKS = tuple(f"scale.task_{n}" for n in range(8))
SERVER_LOG = os.environ.get("BENCH_SCALE_SERVER_LOG", "")
KEEP = os.environ.get("BENCH_SCALE_KEEP", "") not in ("", "0")


def scale_database_url() -> str:
    if os.environ.get("BENCH_SCALE_DATABASE_URL"):
        return os.environ["BENCH_SCALE_DATABASE_URL"]
    parts = urlsplit(harness.DATABASE_URL)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "_scale"))


# The mix, one row per ``g``: its share of the table is the share of ``g % 100``.
BUILD_JOBS = """
INSERT INTO jobs_job (task, queue, payload, status, priority, attempts, max_attempts,
    run_after, lease_expires_at, locked_by, cancel_requested_at, idempotency_key, last_error,
    reason, attempts_history, result, published_at, publish_count, created_at, updated_at,
    started_at, finished_at, unique_states, limit_key)
SELECT (%(tasks)s::text[])[1 + g %% 8], (%(queues)s::text[])[1 + (g / 8) %% 4],
    jsonb_build_object('n', g),
    kind, 0, CASE kind WHEN 'dead' THEN 3 WHEN 'retrying' THEN 1 WHEN 'queued' THEN 0 ELSE 1 END,
    3, CASE kind WHEN 'queued' THEN now() - make_interval(secs => g %% 3600)
                 WHEN 'retrying' THEN now() + make_interval(secs => 60 + g %% 1500)
                 ELSE ended - interval '2 seconds' END,
    NULL, '', NULL, NULL,
    CASE kind WHEN 'dead' THEN 'ValueError: boom' WHEN 'retrying' THEN 'ValueError: boom'
              ELSE '' END,
    CASE kind WHEN 'dead' THEN 'exhausted' WHEN 'retrying' THEN 'error' ELSE '' END,
    CASE kind WHEN 'dead' THEN (
        SELECT jsonb_agg(jsonb_build_object('attempt', a, 'worker', 'w@host:1/1',
            'started_at', ended - make_interval(secs => 600 * (3 - a) + 1),
            'finished_at', ended - make_interval(secs => 600 * (3 - a)),
            'outcome', CASE a WHEN 3 THEN 'dead' ELSE 'retrying' END,
            'reason', CASE a WHEN 3 THEN 'exhausted' ELSE 'error' END,
            'error', jsonb_build_object('class_path', 'builtins.ValueError',
                'message', 'boom', 'traceback', repeat('  File "x.py", line 1, in f\n', 12))))
        FROM generate_series(1, 3) AS a)
        WHEN 'retrying' THEN '[]'::jsonb ELSE '[]'::jsonb END,
    CASE kind WHEN 'succeeded' THEN '{"ok": true}'::jsonb END,
    CASE WHEN kind IN ('queued', 'retrying') THEN now() END,
    CASE WHEN kind IN ('queued', 'retrying') THEN 5 ELSE 0 END,
    ended - interval '3 seconds', ended,
    CASE WHEN kind IN ('succeeded', 'dead') THEN ended - interval '1 second' END,
    CASE WHEN kind IN ('succeeded', 'dead') THEN ended END, '', ''
FROM (
    SELECT g,
        CASE WHEN g %% 100 < 2 THEN 'dead' WHEN g %% 100 < 7 THEN 'queued'
             WHEN g %% 100 = 7 THEN 'retrying' ELSE 'succeeded' END AS kind,
        now() - make_interval(secs => (g::bigint * 7919) %% CASE WHEN g %% 100 < 2
            THEN 29 * 86400 ELSE 30 * 86400 END) AS ended
    FROM generate_series(1, %(rows)s) AS g
) AS mix
"""

BUILD_RUNNING = """
INSERT INTO jobs_job (task, queue, payload, status, priority, attempts, max_attempts,
    run_after, lease_expires_at, locked_by, last_error, reason, attempts_history,
    publish_count, created_at, updated_at, started_at, unique_states, limit_key)
SELECT (%(tasks)s::text[])[1 + g %% 8], 'default', '{}'::jsonb, 'running', 0, 1, 3, now(),
    now() + interval '1 hour', 'scale@host:1/' || g, '', '', '[]'::jsonb, 0,
    now(), now(), now(), '', ''
FROM generate_series(1, %(rows)s) AS g
"""


def execute(sql: str, params=None) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def scalar(sql: str, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row else None


def build(size: int) -> float:
    """Empty the tables and build ``size`` jobs (and their neighbours); return seconds."""
    from django.utils import timezone

    from deployments.models import Deployment, DeploymentStatus, Project
    from webhooks.models import Delivery, DeliveryStatus, Endpoint, Event

    started = time.monotonic()
    execute(
        "TRUNCATE jobs_job, webhooks_deliveryattempt, webhooks_delivery, webhooks_event, "
        "deployments_deployment CASCADE"
    )
    if size:
        params = {"tasks": list(TASKS), "queues": list(QUEUES)}
        execute(BUILD_JOBS, {**params, "rows": size})
        execute(BUILD_RUNNING, {**params, "rows": RUNNING_ROWS})
        now = timezone.now()
        endpoint = Endpoint.objects.first()
        events = Event.objects.bulk_create(
            (
                Event(type="job.dead", body="{}", created_at=now - timedelta(minutes=n % 40000))
                for n in range(size // 200)
            ),
            batch_size=5000,
        )
        statuses = [DeliveryStatus.DELIVERED] * 8 + [DeliveryStatus.DEAD, DeliveryStatus.PENDING]
        Delivery.objects.bulk_create(
            (
                Delivery(
                    event=event,
                    endpoint=endpoint,
                    status=statuses[n % 10],
                    created_at=event.created_at,
                    updated_at=event.created_at,
                )
                for n, event in enumerate(events)
            ),
            batch_size=5000,
        )
        project = Project.objects.get(slug="scale")
        Deployment.objects.bulk_create(
            (
                Deployment(
                    project=project,
                    environment="production",
                    ref="main",
                    pipeline_name="default",
                    timeout=600,
                    status=DeploymentStatus.SUCCESS,
                    created_at=now - timedelta(minutes=n * 3),
                    updated_at=now - timedelta(minutes=n * 3),
                    finished_at=now - timedelta(minutes=n * 3 - 1),
                )
                for n in range(size // 1000)
            ),
            batch_size=5000,
        )
    execute("VACUUM ANALYZE")
    settle()
    return time.monotonic() - started


def settle() -> None:
    """Write the build's dirty pages now, not in the background while the reads are timed."""
    from django.db import DatabaseError

    # A superuser's or pg_checkpoint's; without either the reads share the disk with it.
    with contextlib.suppress(DatabaseError):
        execute("CHECKPOINT")


def median_ms(run, repeats: int = REPEATS) -> float:
    run()  # warm-up: connections, caches, compiled templates
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1)


def dashboard_refresh_url() -> str:
    """The console's dashboard refresh: its own URL if the admin has one, else the page."""
    from django.contrib import admin
    from django.urls import reverse

    names = sorted(
        pattern.name
        for pattern in admin.site.get_urls()
        if getattr(pattern, "name", None)
        and pattern.name.startswith("dashboard")
        and pattern.name != "dashboard"
    )
    return reverse(f"admin:{names[0]}") if names else reverse("admin:dashboard")


def http_reads(client, token: str) -> dict:
    from django.urls import reverse

    from jobs.models import Job

    def get(url: str, **headers):
        def run():
            response = client.get(url, **headers)
            if response.status_code != 200:
                raise SystemExit(f"GET {url}: {response.status_code}")

        return run

    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    changelist = reverse("admin:jobs_job_changelist")
    one = Job.objects.order_by().values_list("pk", flat=True).first()
    reads = {
        "GET /api/v1/queue": get("/api/v1/queue", **bearer),
        "GET /metrics": get("/metrics", **bearer),
        "/admin/dashboard/": get(reverse("admin:dashboard")),
        "its refresh": get(dashboard_refresh_url()),
        "Jobs changelist": get(changelist),
        "changelist ?status=dead": get(f"{changelist}?status__exact=dead"),
        "changelist ?queue=webhooks": get(f"{changelist}?queue=webhooks"),
        "changelist ?task=…_3": get(f"{changelist}?task={TASKS[3]}"),
    }
    if one is not None:
        reads["one job's page"] = get(reverse("admin:jobs_job_change", args=[one]))
    return {name: median_ms(run) for name, run in reads.items()}


def sweeper_ms() -> float:
    from jobs.maintenance.sweeper import sweep

    return median_ms(sweep)


def claim_ms() -> tuple[float, float]:
    """The claim's median time, prepared (as a worker sends it) and as text, alternating."""
    from django.db import connection
    from django.test.utils import override_settings

    from jobs.statements import claim

    execute(
        BUILD_RUNNING.replace("'running'", "'queued'"),
        {"tasks": ["scale.claim"] * 8, "rows": CLAIMS},
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM jobs_job WHERE task = 'scale.claim' AND status = 'queued'")
        ids = cursor.fetchall()
    times: dict[bool, list[float]] = {True: [], False: []}
    for number, (job_id,) in enumerate(ids):
        prepared = number % 2 == 0
        with override_settings(CONVEYOR_PREPARED_STATEMENTS=prepared):
            started = time.perf_counter()
            if claim(job_id, task="scale.claim", worker="scale@bench:1/1") is None:
                raise SystemExit(f"claim of {job_id} failed")
            times[prepared].append((time.perf_counter() - started) * 1000)
    execute("DELETE FROM jobs_job WHERE task = 'scale.claim'")
    return tuple(round(statistics.median(times[way]), 2) for way in (True, False))


def pickup_ms() -> float:
    from django.db import transaction

    from bench.tasks import counter
    from jobs import services

    times = []
    for n in range(PICKUPS + 2):
        key = f"bench:scale:{uuid.uuid4().hex}"
        with transaction.atomic():
            services.enqueue("bench.job_stamp", {"key": key})
        started = time.time()
        got = counter().blpop([key], timeout=60)
        if got is None:
            raise SystemExit("no job body started within 60 s")
        if n >= 2:  # the first two warm up the worker's children
            times.append((float(got[1]) - started) * 1000)
    return round(statistics.median(times), 1)


def server_log_path() -> str | None:
    """PostgreSQL's log file if this session may read it (a superuser), else None."""
    candidates = [SERVER_LOG] if SERVER_LOG else []
    current = scalar("SELECT pg_current_logfile()")
    if current:
        candidates.append(current)
    major = int(scalar("SHOW server_version_num")) // 10000
    candidates.append(f"/var/log/postgresql/postgresql-{major}-main.log")
    for path in candidates:
        try:
            scalar("SELECT size FROM pg_stat_file(%s)", [path])
            return path
        except Exception:
            from django.db import connection

            connection.close()
    return None


def longest_logged_ms(path: str, offset: int, pid: int) -> float | None:
    size = scalar("SELECT size FROM pg_stat_file(%s)", [path])
    text = scalar("SELECT pg_read_file(%s, %s, %s)", [path, offset, size - offset]) or ""
    found = [
        float(ms)
        for line_pid, ms in re.findall(r"\[(\d+)\][^\n]*?duration: ([\d.]+) ms", text)
        if int(line_pid) == pid
    ]
    return round(max(found), 1) if found else None


def measure_purge() -> dict:
    """Expire the oldest succeeded rows and purge them for at most the budget."""
    from django.db import connection, connections
    from django.test import override_settings
    from django.utils import timezone

    from jobs.maintenance.purge import purge

    succeeded = scalar("SELECT count(*) FROM jobs_job WHERE status = 'succeeded'")
    target = min(PURGE_ROWS, succeeded // 2)
    boundary = scalar(
        "SELECT finished_at FROM jobs_job WHERE status = 'succeeded' "
        "ORDER BY finished_at OFFSET %s LIMIT 1",
        [target],
    )
    retention = timezone.now() - boundary
    log_path = server_log_path()
    offset = scalar("SELECT size FROM pg_stat_file(%s)", [log_path]) if log_path else 0
    state: dict = {"client_max_ms": 0.0}

    def timed(execute_, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute_(sql, params, many, context)
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            state["client_max_ms"] = max(state["client_max_ms"], elapsed)

    def run():
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                state["pid"] = cursor.fetchone()[0]
                if log_path:
                    cursor.execute("SET log_min_duration_statement = 0")
            with (
                override_settings(CONVEYOR_PURGE_COMPLETED_RETENTION=retention),
                connection.execute_wrapper(timed),
            ):
                purge()
            state["finished"] = True
        except Exception as exc:  # cancelled at the budget, or a real failure
            state["error"] = repr(exc)
        finally:
            if log_path and "pid" in state:
                try:
                    with connection.cursor() as cursor:
                        cursor.execute("RESET log_min_duration_statement")
                except Exception:
                    pass
            connection.close()

    thread = threading.Thread(target=run)
    started = time.monotonic()
    thread.start()
    thread.join(PURGE_BUDGET_S)
    while thread.is_alive():
        scalar("SELECT pg_cancel_backend(%s)", [state.get("pid")])
        thread.join(0.5)
    elapsed = time.monotonic() - started
    deleted = succeeded - scalar("SELECT count(*) FROM jobs_job WHERE status = 'succeeded'")
    result = {
        "expired_rows": target,
        "deleted_rows": deleted,
        "seconds": round(elapsed, 1),
        "rows_per_s": round(deleted / elapsed) if elapsed else 0,
        "finished": bool(state.get("finished")),
        "client_longest_statement_ms": round(state["client_max_ms"], 1),
        "server_longest_statement_ms": (
            longest_logged_ms(log_path, offset, state["pid"])
            if log_path and "pid" in state
            else None
        ),
    }
    if "error" in state and not state.get("finished"):
        result["stopped"] = state["error"][:120]
    connections.close_all()
    return result


def setup_fixtures() -> tuple:
    """Create the console's superuser, the project, the endpoint; return (user, raw token)."""
    from django.contrib.auth import get_user_model

    from deployments.models import Project
    from project.access.models import TokenScope
    from project.access.tokens import token_create
    from webhooks.models import Endpoint

    user = get_user_model().objects.create_superuser("scale-admin", "", uuid.uuid4().hex)
    Project.objects.create(slug="scale", name="scale")
    Endpoint.objects.create(url="https://93.184.215.14/hook", topics=["job.dead"], secret="x")
    _, raw_token = token_create(name="scale", scope=TokenScope.ADMIN)
    return user, raw_token


def table(results: dict) -> str:
    sizes = [str(size) for size in SIZES]
    label = {0: "0", 1_000_000: "1M", 10_000_000: "10M"}
    head = [label.get(size, f"{size:,}") for size in SIZES]
    last = head[-1]
    lines = [
        f"| read | {' | '.join(head)} | {last}/0 |",
        "|---|" + "---:|" * (len(head) + 1),
    ]
    names = list(dict.fromkeys(name for s in sizes for name in results[s]["reads"]))
    for name in names:
        values = [results[s]["reads"].get(name) for s in sizes]
        ratio = f"{values[-1] / values[0]:.1f}×" if values[0] and values[-1] is not None else ""
        cells = " | ".join(f"{v:,.1f} ms" if v is not None else "—" for v in values)
        lines.append(f"| {name} | {cells} | {ratio} |")
    purges = [results[s].get("purge") for s in sizes]
    if any(purges):
        cells = []
        for p in purges:
            if not p:
                cells.append("—")
                continue
            longest = p["server_longest_statement_ms"] or p["client_longest_statement_ms"]
            done = "" if p["finished"] else f", stopped at {p['seconds']:.0f} s"
            cells.append(
                f"{p['rows_per_s']:,} rows/s ({p['deleted_rows']:,} rows{done}); "
                f"longest statement {longest:,.1f} ms"
            )
        lines.append(f"| purge | {' | '.join(cells)} | |")
    return "\n".join(lines)


def main() -> dict:
    harness.DATABASE_URL = scale_database_url()
    env = harness.configure_environment(DATABASE_URL=harness.DATABASE_URL)
    harness.prepare_database()
    harness.setup_django()
    from django.contrib.auth import get_user_model
    from django.test import Client

    import bench.tasks  # noqa: F401 - registers the benchmark's tasks with this process's app

    execute(
        "TRUNCATE auth_user, jobs_apitoken, deployments_project, webhooks_endpoint, "
        "jobs_maintenancerun CASCADE"
    )
    user, token = setup_fixtures()
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(pk=user.pk))
    harness.purge("default")
    worker = harness.start_worker(env, concurrency=1)
    results: dict = {"sizes": SIZES}
    try:
        for size in SIZES:
            built = build(size)
            print(f"scale: {size:,} jobs built in {built:.0f} s", flush=True)
            entry = {"build_s": round(built, 1)}
            entry["reads"] = {"sweeper run": sweeper_ms(), **http_reads(client, token)}
            entry["reads"]["the claim"], entry["reads"]["the claim, as text"] = claim_ms()
            entry["reads"]["pickup"] = pickup_ms()
            if size and not (KEEP and size == SIZES[-1]):
                entry["purge"] = measure_purge()
            results[str(size)] = entry
            print(f"scale: {size:,} measured: {entry}", flush=True)
    finally:
        worker.stop()
    harness.record("scale", results)
    print()
    print(table(results))
    if KEEP:
        print(f"\nscale: {harness.DATABASE_URL} kept with {SIZES[-1]:,} jobs as built")
    return results


if __name__ == "__main__":
    main()
