"""Webhook delivery throughput: Conveyor's webhooks worker against plain ``requests``.

One worker serves the ``webhooks`` queue the way Conveyor runs it: ``--pool threads
--concurrency 32`` (``BENCH_WEBHOOK_CONCURRENCY``). Two local receivers (127.0.0.1,
``ThreadingHTTPServer``, 204 with keep-alive): one answers after ``BENCH_RECEIVER_DELAY``
(0.1 s), one at once. Interleaved rounds (5, or 2 with ``BENCH_QUICK=1``) of four variants,
each ``BENCH_EVENTS`` deliveries (2,000, or 400 quick):

* ``slow_conveyor``: ``notify()`` writes the events in one transaction (an Event, a Delivery
  and a ``webhooks.deliver`` job each, one message per job); the worker claims, signs,
  resolves and checks the host, posts, records the attempt and completes each job. The clock
  runs from the commit to the last ``delivered_at``;
* ``slow_pool``: a ``ThreadPoolExecutor`` of the same concurrency posting the same bodies,
  signed the same way (both signatures, per post), with one ``requests.Session`` per thread;
* ``instant_conveyor`` / ``instant_loop``: the same against the instant receiver, the
  baseline a plain sequential ``requests.Session`` loop (unsigned).

The per-endpoint limit is set to the pool's size (``CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY``),
so the one endpoint may use every thread, as the pool does; it is still enforced on every
claim. If deliveries stall for 15 s the sweeper runs once, as beat would, and ``swept`` counts the
jobs it re-sent (normally 0). Also the SQL statements of one delivery, counted in-process
after a first one (which prepares the claim's statements on that connection).
"""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench import harness

EVENTS = int(os.environ.get("BENCH_EVENTS") or (400 if harness.QUICK else 2000))
THREADS = int(os.environ.get("BENCH_WEBHOOK_CONCURRENCY") or 32)
DELAY = float(os.environ.get("BENCH_RECEIVER_DELAY") or 0.1)
STALL_SECONDS = 15
TIMEOUT = 300
TOPIC = "deployment.succeeded"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.delay:
            time.sleep(self.server.delay)
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
        with self.server.lock:
            self.server.count += 1

    def log_message(self, format, *args) -> None:  # noqa: A002
        pass


class Receiver(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, delay: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay, self.count, self.lock = delay, 0, threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


def reset() -> None:
    """Start a round with no endpoint, event or delivery job, an empty broker, and no limit
    state left from an earlier round: a refusal mark left on the task or the queue would send
    an extra message after every delivery, and an endpoint's start times would count against
    a rate (``CONVEYOR_WEBHOOK_ENDPOINT_RATE``) set in the environment."""
    from jobs.models import Job, LimitKeyState, QueueState, TaskState
    from webhooks.dispatch import DELIVER_TASK
    from webhooks.models import Endpoint, Event

    Endpoint.objects.all().delete()
    Event.objects.all().delete()
    Job.objects.filter(task=DELIVER_TASK).delete()
    TaskState.objects.filter(name=DELIVER_TASK).update(held_at=None)
    QueueState.objects.filter(name="webhooks").update(held_at=None)
    LimitKeyState.objects.filter(task=DELIVER_TASK).delete()
    harness.purge()


def conveyor(url: str) -> dict:
    """Deliver EVENTS events through notify() and the worker; return timings and bodies."""
    from django.db import transaction
    from django.db.models import Max

    from jobs.maintenance.sweeper import sweep
    from webhooks import notify, services
    from webhooks.models import Delivery, DeliveryStatus

    reset()
    endpoint = services.endpoint_create(url=url, topics=[TOPIC], actor="bench")
    started = time.time()
    with transaction.atomic():
        events = [notify(TOPIC, {"deployment": n}) for n in range(EVENTS)]
        committing = time.time()
    deadline, delivered, progress_at, swept = time.monotonic() + TIMEOUT, 0, time.monotonic(), 0
    while delivered < EVENTS:
        now = time.monotonic()
        if now > deadline:
            raise SystemExit(f"deliveries did not finish within {TIMEOUT}s: {stuck()}")
        if now - progress_at > STALL_SECONDS:  # what beat's sweeper does in production
            swept += sweep().republished
            progress_at = now
        time.sleep(0.05)
        count = Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count()
        delivered, progress_at = count, (time.monotonic() if count > delivered else progress_at)
    last = Delivery.objects.aggregate(last=Max("delivered_at"))["last"].timestamp()
    return {
        "seconds": last - committing,
        "notify_seconds": committing - started,
        "swept": swept,
        "events": [(e.message_id, e.body.encode()) for e in events],
        "endpoint": endpoint,
    }


def signed_pool(url: str, run: dict) -> float:
    """Post the same bodies, signed the same way, from THREADS threads; return the seconds."""
    import requests
    from django.utils import timezone

    from webhooks.signing import active_secrets, signature_headers

    local = threading.local()
    endpoint = run["endpoint"]

    def post(event: tuple[str, bytes]) -> None:
        message_id, body = event
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        now = timezone.now()
        headers = signature_headers(
            active_secrets(endpoint, now),
            message_id=message_id,
            topic=TOPIC,
            timestamp=int(now.timestamp()),
            body=body,
        )
        headers["Content-Type"] = "application/json"
        session.post(url, data=body, headers=headers, timeout=10).raise_for_status()

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(post, run["events"][:THREADS]))  # connect every thread's session
        started = time.perf_counter()
        list(pool.map(post, run["events"]))
        return time.perf_counter() - started


def plain_loop(url: str, run: dict) -> float:
    """Post every body with one requests.Session, one after another; return the seconds."""
    import requests

    headers = {"Content-Type": "application/json"}
    with requests.Session() as session:
        started = time.perf_counter()
        for _, body in run["events"]:
            session.post(url, data=body, headers=headers, timeout=10).raise_for_status()
        return time.perf_counter() - started


def statements_per_delivery() -> list[str]:
    """Run one delivery in this process; return the first word of each SQL statement."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from webhooks import notify
    from webhooks.models import Delivery
    from webhooks.tasks import deliver

    warm = notify(TOPIC, {"deployment": "warm-up"})  # prepares the claim's statements
    deliver(Delivery.objects.get(event=warm).job_id)
    event = notify(TOPIC, {"deployment": "statements"})
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


def main() -> dict:
    # One endpoint, the whole pool: the pool baseline has no per-endpoint limit either.
    env = harness.configure_environment(
        CONVEYOR_WEBHOOKS_ALLOW_PRIVATE="true", CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY=str(THREADS)
    )
    harness.prepare_database()
    harness.setup_django()
    reset()
    slow, instant = Receiver(DELAY), Receiver(0)
    runs: dict[str, dict] = {}  # the latest conveyor run per receiver: its bodies for baselines
    swept, notify_rates = 0, []

    def deliver(receiver: Receiver) -> float:
        nonlocal swept
        run = runs[receiver.url] = conveyor(receiver.url)
        swept += run["swept"]
        notify_rates.append(EVENTS / run["notify_seconds"])
        return run["seconds"]

    variants = {
        "slow_conveyor": lambda: deliver(slow),
        "slow_pool": lambda: signed_pool(slow.url, runs[slow.url]),
        "instant_conveyor": lambda: deliver(instant),
        "instant_loop": lambda: plain_loop(instant.url, runs[instant.url]),
    }
    rate: dict[str, list[float]] = {name: [] for name in variants}
    cpu_ms: dict[str, list[float]] = {"slow_conveyor": [], "instant_conveyor": []}
    worker = harness.start_worker(env, concurrency=THREADS, queues="webhooks", pool="threads")
    try:
        for round_no in range(harness.ROUNDS):
            # a baseline needs its conveyor run's bodies: rotate the pairs, not the four
            pairs = harness.order(
                [("slow_conveyor", "slow_pool"), ("instant_conveyor", "instant_loop")], round_no
            )
            for name in [name for pair in pairs for name in pair]:
                cpu = harness.cpu_seconds(worker)
                rate[name].append(EVENTS / variants[name]())
                if name in cpu_ms:  # the worker's CPU per delivery, all its threads
                    cpu_ms[name].append((harness.cpu_seconds(worker) - cpu) / EVENTS * 1000)
                print(f"round {round_no + 1} {name}: {rate[name][-1]:.1f}/s", flush=True)
    finally:
        worker.stop()
    statements = statements_per_delivery()
    reset()
    results = {
        "events_per_round": EVENTS,
        "worker": f"--pool threads --concurrency {THREADS}",
        "receiver_delay_s": DELAY,
    }
    for name in variants:
        results[f"{name}_per_s"] = harness.summary(rate[name])
    results["slow_conveyor_vs_pool"] = harness.ratio_summary(
        rate["slow_conveyor"], rate["slow_pool"]
    )
    results["instant_conveyor_vs_loop"] = harness.ratio_summary(
        rate["instant_conveyor"], rate["instant_loop"]
    )
    for name, values in cpu_ms.items():
        results[f"{name}_worker_cpu_ms_per_delivery"] = harness.summary(values, 2)
    results["notify_events_per_s"] = harness.summary(notify_rates)
    results["swept"] = swept
    results["received"] = slow.count + instant.count
    results["sql_statements_per_delivery"] = f"{len(statements)}: {' + '.join(statements)}"
    harness.record("webhooks", results)
    return results


if __name__ == "__main__":
    main()
