"""The throughput benchmark's two baselines: their workers, publishers and counters.

* ``plain_django``: a minimal Django project with Celery and no Conveyor app
  (``bench.baseline_django``), the alternative a Django team would pick instead;
* ``bare_celery``: a Celery app and nothing else (``bench.baseline_celery``), Celery's ceiling.

Each runs in a ``celery worker`` of its own, started as Conveyor's is (prefork, the same
concurrency, ``--without-gossip --without-mingle --without-heartbeat``, ``--loglevel INFO``
with the per-task lines off), and has a Redis database and a queue of its own, so no worker
ever sees another's messages: ``BENCH_DJANGO_REDIS_URL`` (default: ``BENCH_REDIS_URL``'s
database + 1) and ``BENCH_CELERY_REDIS_URL`` (+ 2). The database is both the broker and the
counter that ``baseline.noop`` bumps. The benchmark publishes with a Celery app of its own
(``send_task`` by name, one producer), as it publishes ``bench.raw_noop`` to Conveyor's worker.
"""

import os
import re
import time
from dataclasses import dataclass, field

import redis
from celery import Celery

from bench import counting, harness
from tests.processes import Worker

TASK = "baseline.noop"
COUNTED = "bench:baseline_noop"
MAX_REDIS_DB = 15  # Redis's default `databases 16`


def redis_db_beside(url: str, offset: int) -> str:
    """``url`` with its database number moved up by ``offset`` (refused past 15)."""
    match = re.fullmatch(r"(redis://[^/?]*)(?:/(\d*))?", url)
    if match is None:
        raise SystemExit(f"BENCH_REDIS_URL={url}: expected redis://host:port/<db number>")
    db = int(match.group(2) or 0) + offset
    if db > MAX_REDIS_DB:
        raise SystemExit(
            f"BENCH_REDIS_URL={url} leaves no Redis database {db} for a baseline: use a lower "
            "database or set BENCH_DJANGO_REDIS_URL and BENCH_CELERY_REDIS_URL"
        )
    return f"{match.group(1)}/{db}"


@dataclass
class Baseline:
    name: str
    app: str  # what ``celery -A`` loads
    queue: str
    redis_url: str
    django_settings: str | None
    _publisher: Celery | None = field(default=None, repr=False)
    _counter: redis.Redis | None = field(default=None, repr=False)

    def worker_env(self, env: dict) -> dict:
        """The benchmark's environment without Conveyor's settings, pointed at this baseline."""
        own = {k: v for k, v in env.items() if not k.startswith(("CONVEYOR_", "CELERY_"))}
        own.pop("DJANGO_SETTINGS_MODULE", None)  # unset: Celery's Django fix-up stays off
        if self.django_settings:
            own["DJANGO_SETTINGS_MODULE"] = self.django_settings
        return {
            **own,
            "CELERY_BROKER_URL": self.redis_url,
            "BENCH_BROKER_URL": self.redis_url,
            "BENCH_COUNTER_URL": self.redis_url,
        }

    @property
    def counter(self) -> redis.Redis:
        if self._counter is None:
            self._counter = redis.Redis.from_url(self.redis_url)
        return self._counter

    @property
    def publisher(self) -> Celery:
        if self._publisher is None:
            self._publisher = Celery(
                f"bench-{self.name}", broker=self.redis_url, set_as_current=False
            )
        return self._publisher

    def reset(self) -> None:
        """Empty this baseline's queue and counters (its Redis database holds nothing else)."""
        with self.publisher.connection_for_write(self.redis_url) as conn:
            conn.default_channel.queue_purge(self.queue)
        self.counter.delete(COUNTED, counting.FIRST, counting.LAST)

    def publish(self, n: int) -> None:
        """``send_task`` of ``n`` no-ops through one producer, as ``bench.raw_noop`` is sent.

        The URL is passed each time: Celery's ``broker_url`` prefers ``CELERY_BROKER_URL``
        from the environment, which in this process is Conveyor's broker.
        """
        with self.publisher.connection_for_write(self.redis_url) as conn:
            producer = self.publisher.amqp.Producer(conn)
            for _ in range(n):
                self.publisher.send_task(TASK, queue=self.queue, producer=producer)

    def start(self, env: dict, *, concurrency: int) -> "BaselineWorker":
        return BaselineWorker(self, self.worker_env(env), concurrency=concurrency)


def baselines() -> list[Baseline]:
    """Both baselines. Their worker modules are never imported here: a Celery app made in
    this process would become its current app, in place of Conveyor's."""
    redis_url = harness.REDIS_URL
    return [
        Baseline(
            name="plain_django",
            app="bench.baseline_django",
            queue="plain_django",
            redis_url=os.environ.get("BENCH_DJANGO_REDIS_URL") or redis_db_beside(redis_url, 1),
            django_settings="bench.baseline_django.settings",
        ),
        Baseline(
            name="bare_celery",
            app="bench.baseline_celery",
            queue="bare_celery",
            redis_url=os.environ.get("BENCH_CELERY_REDIS_URL") or redis_db_beside(redis_url, 2),
            django_settings=None,
        ),
    ]


class BaselineWorker(Worker):
    """A baseline's ``celery worker`` process; ``started`` is when its command was run."""

    def __init__(self, baseline: Baseline, env: dict, *, concurrency: int) -> None:
        self.started = time.time()
        super().__init__(
            env,
            queues=baseline.queue,
            concurrency=concurrency,
            name=f"bench-{baseline.name}",
            include=None,
            extra_args=("--pool", "prefork"),
            app=baseline.app,
        )

    def stop(self) -> None:
        """Warm shutdown, then SIGKILL whatever is left of the tree; drop the log."""
        super().stop()
        self.log_path.unlink(missing_ok=True)
