"""Flow control declared on a task: concurrency, rates and fair sharing that hold everywhere.

A ``Limit`` on a JobTask (``limit = Limit(...)``) says how its jobs may start:

* ``concurrency``: the most of the task's jobs running at once, across every worker and host;
* ``key``: the payload keys whose values make a job's *limit key* (``customer_id``), stored
  on the row at enqueue as ``limit_key``; then ``key_concurrency`` is the most running at
  once per key, ``key_rate`` the most starts per key in any window of its period;
* ``rate``: the most starts of the task in any window of its period (``"5/s"``, ``"100/m"``,
  ``"1000/h"``): a sliding window, not a bucket that refills;
* ``fair``: serve the keys round-robin, the key that started least recently first, so a key
  with 10,000 jobs queued cannot starve one with 10.

A job held back by a limit stays queued and spends no attempt (jobs.limiter decides, with
the task's state row locked, so every claim of the task takes its turn and the figures are
exact). A slot freed by a run's end rings for the task at once if a claim was refused for
a slot meanwhile (jobs.limiter.wake); a rate window that is full re-rings when it frees.
"""

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.core.exceptions import ImproperlyConfigured

LIMIT_KEY_LENGTH = 200
_PERIODS = {"s": 1, "m": 60, "h": 3600}
_RATE = re.compile(r"^\s*([1-9][0-9]{0,5})\s*/\s*([smh])\s*$")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any window of ``period``."""

    count: int
    period: timedelta

    def __str__(self) -> str:
        seconds = int(self.period.total_seconds())
        unit = {1: "s", 60: "m", 3600: "h"}[seconds]
        return f"{self.count}/{unit}"


def parse_rate(text: object) -> Rate:
    """Parse ``"N/s"``, ``"N/m"`` or ``"N/h"`` (N from 1 to 999999); ValueError otherwise."""
    found = _RATE.match(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError(f"a rate is N/s, N/m or N/h (e.g. '5/s'), not {text!r}")
    return Rate(int(found[1]), timedelta(seconds=_PERIODS[found[2]]))


def _positive(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class Limit:
    """How a task's jobs may start; see the module's text."""

    concurrency: int | None = None
    key: tuple[str, ...] | None = None
    key_concurrency: int | None = None
    rate: str | None = None
    key_rate: str | None = None
    fair: bool = False

    def problem(self) -> str | None:
        """Return what is wrong with this limit, in a few words, or None if it can work."""
        for name in ("concurrency", "key_concurrency"):
            value = getattr(self, name)
            if value is not None and not _positive(value):
                return f"{name} must be a positive integer or None, not {value!r}"
        for name in ("rate", "key_rate"):
            value = getattr(self, name)
            if value is not None:
                try:
                    parse_rate(value)
                except ValueError as exc:
                    return f"{name}: {exc}"
        if self.key is not None and (
            isinstance(self.key, str)
            or not isinstance(self.key, Sequence)
            or not self.key
            or not all(isinstance(name, str) and name for name in self.key)
        ):
            return f"key must be a tuple of payload key names, not {self.key!r}"
        keyed = self.key_concurrency is not None or self.key_rate is not None or self.fair
        if keyed and self.key is None:
            return "key_concurrency, key_rate and fair need key (the payload keys to group by)"
        if not isinstance(self.fair, bool):
            return f"fair must be True or False, not {self.fair!r}"
        if not (self.concurrency or self.rate or keyed):
            return (
                "a limit needs at least one of concurrency, rate, key_concurrency, key_rate, fair"
            )
        return None

    def check(self, owner: str) -> None:
        """Raise ImproperlyConfigured naming ``owner`` if this limit cannot work."""
        problem = self.problem()
        if problem is not None:
            raise ImproperlyConfigured(f"task {owner!r}: limit: {problem}")

    @property
    def task_rate(self) -> Rate | None:
        return parse_rate(self.rate) if self.rate is not None else None

    @property
    def per_key_rate(self) -> Rate | None:
        return parse_rate(self.key_rate) if self.key_rate is not None else None

    @property
    def keyed(self) -> bool:
        """Whether claims look at each job's key (per-key limits or fairness)."""
        return self.key is not None

    @property
    def frees_slots(self) -> bool:
        """Whether a run's end can let a held job start (a concurrency limit)."""
        return self.concurrency is not None or self.key_concurrency is not None

    def key_of(self, payload: dict) -> str:
        """The limit key of a job with ``payload``: its key values as compact JSON (a missing
        value is ``null``); a longer one than the column holds, its prefix and a digest."""
        if self.key is None:
            return ""
        values = [payload.get(name) for name in self.key]
        value = values[0] if len(values) == 1 else values
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        if len(text) <= LIMIT_KEY_LENGTH:
            return text
        digest = hashlib.sha256(text.encode()).hexdigest()
        return f"{text[: LIMIT_KEY_LENGTH - len(digest) - 1]}~{digest}"

    def describe(self) -> dict:
        """The limit as the queues API and the console show it."""
        return {
            "concurrency": self.concurrency,
            "key": list(self.key) if self.key else None,
            "key_concurrency": self.key_concurrency,
            "rate": self.rate,
            "key_rate": self.key_rate,
            "fair": self.fair,
        }


def summary(limit: Limit | None) -> str:
    """The limit in a few words (``concurrency=2, key=tenant, key_rate=5/s``), or ``-``."""
    if limit is None:
        return "-"
    parts = []
    for name, value in limit.describe().items():
        if isinstance(value, list):
            value = ",".join(value)
        if value not in (None, False):
            parts.append(f"{name}={value}")
    return ", ".join(parts)


def limit_of(task: object) -> Limit | None:
    """The ``Limit`` declared on a task object, or None."""
    limit = getattr(task, "limit", None)
    return limit if isinstance(limit, Limit) else None


def check_declared(task_name: str, limit: object, *, on_job_task: bool) -> None:
    """Fail start-up (ImproperlyConfigured naming the task) on a bad ``limit`` declaration."""
    if limit is None:
        return
    if not on_job_task:
        raise ImproperlyConfigured(
            f"task {task_name!r}: a limit needs a job task (base=jobs.task.JobTask)"
        )
    if not isinstance(limit, Limit):
        raise ImproperlyConfigured(
            f"task {task_name!r}: limit must be a jobs.limits.Limit, not {limit!r}"
        )
    limit.check(task_name)
