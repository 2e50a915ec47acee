"""Webhook delivery throughput: Conveyor's workers against a plain ``requests.Session`` loop.

Both post the same N event bodies to the same local receiver (127.0.0.1, answers 204 with
keep-alive), in the same run:

* **baseline**: one ``requests.Session`` posting the bodies one after another;
* **conveyor**: ``notify()`` writes N events in one transaction (one delivery job each); a
  real ``celery worker`` (``BENCH_CONCURRENCY``, default 2 processes) claims, signs, posts,
  records each attempt and completes each job. The clock runs from the commit to the last
  delivery marked ``delivered``. If deliveries stall for 15 s the sweeper runs once, as
  beat would in production, and ``swept`` counts the jobs it re-sent (normally 0).

Also the SQL statements of one successful delivery, counted in this process around one
``webhooks.deliver`` call (the worker's hot path: claim, read, record, complete).

The ratio is conveyor / baseline deliveries per second. Settings (environment):
``BENCH_DATABASE_URL`` (postgres://postgres@127.0.0.1:5432/conveyor_bench),
``BENCH_REDIS_URL`` (redis://127.0.0.1:6379/9), ``BENCH_EVENTS`` (2000, or 300 with
``BENCH_QUICK=1``), ``BENCH_CONCURRENCY`` (2). Results go to ``bench/results/webhooks.json``.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
QUICK = os.environ.get("BENCH_QUICK") == "1"
EVENTS = int(os.environ.get("BENCH_EVENTS") or (300 if QUICK else 2000))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY") or 2)
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/conveyor_bench"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
# No delivery for this long: run the sweeper once, as beat would (it re-sends jobs that are
# due for longer than CONVEYOR_SWEEPER_GRACE but were never claimed, e.g. a lost publish).
STALL_SECONDS = 15


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.server.count += 1

    def log_message(self, format, *args) -> None:  # noqa: A002
        pass


def start_receiver() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.count = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def setup_django(var_dir: str) -> None:
    os.environ.update(
        DATABASE_URL=DATABASE_URL,
        CELERY_BROKER_URL=REDIS_URL,
        CONVEYOR_VAR_DIR=var_dir,
        CONVEYOR_WEBHOOKS_ALLOW_PRIVATE="true",
        DJANGO_SETTINGS_MODULE="project.settings",
    )
    sys.path.insert(0, str(ROOT))
    import psycopg

    parsed = urlparse(DATABASE_URL)
    name = parsed.path.lstrip("/")
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    import logging

    import django

    django.setup()
    logging.getLogger().setLevel(logging.WARNING)  # this process only; the worker logs INFO
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def reset() -> None:
    from jobs.models import Job
    from project.celery import QUEUES, app
    from webhooks.models import Endpoint, Event

    Endpoint.objects.all().delete()
    Event.objects.all().delete()
    Job.objects.filter(task="webhooks.deliver").delete()
    with app.connection_for_write() as conn:
        for queue in QUEUES:
            conn.default_channel.queue_purge(queue)


def baseline(url: str, bodies: list[bytes]) -> float:
    """Post every body with one requests.Session; return the seconds it took."""
    import requests

    headers = {"Content-Type": "application/json"}
    with requests.Session() as session:
        started = time.perf_counter()
        for body in bodies:
            session.post(url, data=body, headers=headers, timeout=10).raise_for_status()
        return time.perf_counter() - started


def start_worker(var_dir: str) -> subprocess.Popen:
    log = open(Path(var_dir) / "worker.log", "wb")  # noqa: SIM115 - lives as long as the worker
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "project", "worker", "--queues", "webhooks"]
        + ["--concurrency", str(CONCURRENCY), "--hostname", f"bench-{os.getpid()}@%h"]
        + ["--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO"],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while b"ready." not in (Path(var_dir) / "worker.log").read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_worker(process)
            raise SystemExit("the benchmark worker did not start: see " + log.name)
        time.sleep(0.2)
    return process


def stop_worker(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def conveyor(url: str) -> dict:
    """Deliver EVENTS events through notify() and a real worker; return the timings."""
    from django.db import transaction

    from jobs.maintenance.sweeper import sweep
    from webhooks import notify, services
    from webhooks.models import Delivery, DeliveryStatus

    services.endpoint_create(url=url, topics=["deployment.succeeded"], actor="bench")
    started = time.perf_counter()
    with transaction.atomic():
        events = [notify("deployment.succeeded", {"deployment": n}) for n in range(EVENTS)]
    committed = time.perf_counter()
    deadline, delivered, progress_at, swept = committed + 300, 0, committed, 0
    while delivered < EVENTS:
        now = time.perf_counter()
        if now > deadline:
            raise SystemExit(f"deliveries did not finish within 5 minutes: {stuck()}")
        if now - progress_at > STALL_SECONDS:  # what beat's sweeper does in production
            swept += sweep().republished
            progress_at = now
        time.sleep(0.05)
        count = Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count()
        delivered, progress_at = count, (time.perf_counter() if count > delivered else progress_at)
    done = time.perf_counter()
    return {
        "bodies": [e.body.encode() for e in events],
        "notify_seconds": committed - started,
        "deliver_seconds": done - committed,
        "swept": swept,
    }


def statements_per_delivery() -> list[str]:
    """Run one delivery in this process; return the first word of each SQL statement."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from webhooks import notify
    from webhooks.models import Delivery
    from webhooks.tasks import deliver

    event = notify("deployment.succeeded", {"deployment": "statements"})
    (delivery,) = Delivery.objects.filter(event=event)
    with CaptureQueriesContext(connection) as queries:
        deliver(delivery.job_id)
    if not Delivery.objects.filter(pk=delivery.pk, status="delivered").exists():
        raise SystemExit("the in-process delivery was not delivered")
    return [query["sql"].split()[0] for query in queries.captured_queries]


def stuck() -> dict:
    """Describe the deliveries and jobs that did not finish, for a failed run."""
    from django.db.models import Count

    from jobs.models import Job
    from webhooks.models import Delivery

    return {
        "deliveries": dict(Delivery.objects.values_list("status").annotate(n=Count("pk"))),
        "jobs": dict(
            Job.objects.filter(task="webhooks.deliver")
            .values_list("status")
            .annotate(n=Count("pk"))
        ),
        "errors": list(
            Delivery.objects.exclude(last_error="").values_list("last_error", flat=True)[:5]
        ),
    }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as var_dir:
        setup_django(var_dir)
        reset()
        receiver = start_receiver()
        url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
        worker = start_worker(var_dir)
        try:
            run = conveyor(url)
        finally:
            stop_worker(worker)
        base_seconds = baseline(url, run["bodies"])
        received = receiver.count
        statements = statements_per_delivery()  # its message is purged by reset() below
        receiver.shutdown()
        result = {
            "events": EVENTS,
            "worker_concurrency": CONCURRENCY,
            "conveyor_deliveries_per_s": round(EVENTS / run["deliver_seconds"], 1),
            "baseline_posts_per_s": round(EVENTS / base_seconds, 1),
            "notify_events_per_s": round(EVENTS / run["notify_seconds"], 1),
            "received": received,
            "swept": run["swept"],
            "sql_statements_per_delivery": len(statements),
            "sql_statement_kinds": " + ".join(statements),
        }
        result["ratio"] = round(
            result["conveyor_deliveries_per_s"] / result["baseline_posts_per_s"], 3
        )
        reset()
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "webhooks.json").write_text(json.dumps(result, indent=2) + "\n")
    print("webhooks:", json.dumps(result))


if __name__ == "__main__":
    main()
