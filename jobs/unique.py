"""Unique jobs: at most one job per unique key among its unique states, kept by the database.

A ``Unique`` rule (declared on a JobTask as ``unique = Unique(...)`` or passed to
``enqueue(..., unique=...)``) turns a job into a ``unique_key`` (a digest of the task, the
chosen key values and the period's bucket) and a ``unique_states`` text (``,queued,running,``).
The partial unique index ``job_unique_key_live`` covers a row only while its status is among
its own unique states, so a job that dies or is cancelled frees its key with no code on the
state-change paths. The insert is one ``INSERT ... ON CONFLICT (unique_key) WHERE <the index's
condition> DO NOTHING RETURNING``: only that index is its arbiter, so any other integrity
error (an idempotency key, a check) still raises.
"""

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cache

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection
from django.db.models.sql import Query

from jobs.models import UNIQUE_CONSTRAINT, UNIQUE_LIVE, Job, JobStatus
from project.constraints import violates

S = JobStatus
DEFAULT_STATES = frozenset({S.QUEUED, S.RUNNING, S.RETRYING, S.SUCCEEDED})
# The engine moves jobs among these by itself (claim, retry, snooze, hand-back): a rule that
# covers one of them but not the others could make the engine's own update collide.
LIVE_STATES = frozenset({S.QUEUED, S.RUNNING, S.RETRYING})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Unique:
    """Declare that a task's jobs are unique by key, over a period, among some states.

    ``keys``: the payload keys whose values make the key (None: the whole payload);
    ``key``: an explicit key instead (e.g. given at enqueue); ``period``: one job per bucket
    of this length (None: for ever); ``states``: the statuses among which a job is unique.
    """

    keys: tuple[str, ...] | None = None
    key: str | None = None
    period: timedelta | None = None
    states: frozenset[str] = field(default=DEFAULT_STATES)

    def with_key(self, key: str) -> "Unique":
        """Return this rule with an explicit key (the payload is then not looked at)."""
        return replace(self, key=key)

    def problem(self) -> str | None:
        """Return what is wrong with this rule, in a few words, or None if it can work."""
        if self.keys is not None and (
            isinstance(self.keys, str)
            or not isinstance(self.keys, Sequence)
            or not all(isinstance(name, str) and name for name in self.keys)
        ):
            return f"keys must be a tuple of payload key names, not {self.keys!r}"
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            return f"key must be a non-empty string, not {self.key!r}"
        if self.period is not None and (
            not isinstance(self.period, timedelta) or self.period <= timedelta(0)
        ):
            return f"period must be a positive timedelta or None, not {self.period!r}"
        if isinstance(self.states, str) or not isinstance(self.states, Iterable):
            return f"states must be a set of job statuses, not {self.states!r}"
        states = set(self.states)
        unknown = sorted(str(state) for state in states - set(S.values))
        if unknown:
            return f"states {unknown} are not job statuses ({', '.join(S.values)})"
        if S.QUEUED not in states:
            return "states must include queued"
        if states - {S.QUEUED} and not states >= LIVE_STATES:
            return "states beyond queued must include queued, running and retrying"
        return None

    def check(self, owner: str) -> None:
        """Raise ImproperlyConfigured naming ``owner`` if this rule cannot work."""
        problem = self.problem()
        if problem is not None:
            raise ImproperlyConfigured(f"task {owner!r}: unique rule: {problem}")

    def states_text(self) -> str:
        """The states as stored on the row: ``,queued,running,`` (in JobStatus order)."""
        return "," + ",".join(state for state in S.values if state in self.states) + ","

    def digest(self, task: str, payload: dict, now: datetime) -> str:
        """The unique key of a job of ``task`` with ``payload`` enqueued at ``now``."""
        if self.key is not None:
            part = {"key": self.key}
        elif self.keys is None:
            part = {"payload": payload}
        else:
            part = {"payload": {name: payload.get(name) for name in self.keys}}
        bucket = None
        if self.period is not None:
            bucket = (now - _EPOCH) // self.period
        text = json.dumps([task, part, bucket], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def check_declared(tasks: Iterable) -> None:
    """Fail start-up (ImproperlyConfigured naming the task) on a bad ``unique`` declaration."""
    for task_object in tasks:
        check_rule(task_object.name, getattr(task_object, "unique", None))


def check_rule(task: str, rule: object) -> None:
    """Raise ImproperlyConfigured naming ``task`` unless ``rule`` is None or a working Unique."""
    if rule is None:
        return
    if not isinstance(rule, Unique):
        raise ImproperlyConfigured(
            f"task {task!r}: unique must be a jobs.unique.Unique, not {rule!r}"
        )
    rule.check(task)


def stamp(job: Job, rule: Unique, now: datetime) -> None:
    """Write the rule's key, states and period onto an unsaved job."""
    job.unique_key = rule.digest(job.task, job.payload, now)
    job.unique_states = rule.states_text()
    job.unique_period = rule.period


def insert(jobs: list[Job]) -> list[Job]:
    """Insert unique jobs; return, in order, each one or the live job that holds its key.

    The jobs that lost to an existing one come back as that job, ``unique_conflict`` True.
    """
    pending = list(jobs)
    answers: dict[str, Job] = {}
    for _ in range(3):  # a holder may leave its states between our insert and our read
        inserted = _insert_ignoring_conflicts(pending)
        for job in pending:
            if job.unique_key in inserted and job.unique_key not in answers:
                job.pk = inserted.pop(job.unique_key)
                job._state.adding, job._state.db = False, connection.alias
                job.unique_conflict = False
                answers[job.unique_key] = job
        missing = {job.unique_key for job in pending} - answers.keys()
        if missing:
            for holder in Job.objects.filter(UNIQUE_LIVE, unique_key__in=missing).order_by():
                holder.unique_conflict = True
                answers[holder.unique_key] = holder
        pending = [job for job in pending if job.unique_key not in answers]
        if not pending:
            return [answers[job.unique_key] for job in jobs]
    raise IntegrityError("a unique job's key stayed contended; try again")


def _insert_ignoring_conflicts(jobs: list[Job]) -> dict[str, int]:
    """One multi-row INSERT that skips rows whose key is live; return {unique_key: id}."""
    if not jobs:
        return {}
    fields = [f for f in Job._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (
        f"INSERT INTO {quote(Job._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([row] * len(jobs))} "
        f"ON CONFLICT ({quote('unique_key')}) WHERE {_index_condition(connection.vendor)} "
        f"DO NOTHING RETURNING {quote('id')}, {quote('unique_key')}"
    )
    params = [
        f.get_db_prep_save(f.pre_save(job, add=True), connection) for job in jobs for f in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {key: pk for pk, key in cursor.fetchall()}


@cache
def _index_condition(vendor: str) -> str:
    """The unique index's condition as the database has it (ON CONFLICT must repeat it)."""
    query = Query(model=Job, alias_cols=False)
    where = query.build_where(UNIQUE_LIVE)
    sql, params = where.as_sql(query.get_compiler(connection=connection), connection)
    quote_value = connection.schema_editor().quote_value
    return sql % tuple(quote_value(param) for param in params)


def is_unique_violation(exc: IntegrityError) -> bool:
    """Whether ``exc`` is a collision on the unique-jobs index (and not another constraint)."""
    return violates(exc, Job, UNIQUE_CONSTRAINT)
