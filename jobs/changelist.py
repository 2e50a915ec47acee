"""The Jobs changelist at scale: filter choices and page counts that never scan ``jobs_job``.

* **Filter choices** for queue and task come from the declared queues and the registered
  job tasks, plus whatever the accounting has jobs of, not from ``DISTINCT`` over the table.
* **The count** under the list is exact from the accounting when the only filters are
  status, queue and task (or none); otherwise exact by a capped count
  (``SELECT count(*) FROM (… LIMIT cap + 1)``) when at most ``EXACT_COUNT_CAP`` rows match;
  beyond that PostgreSQL's planner estimate, shown as "about N" (on SQLite "more than N").
"""

import json

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.utils.functional import cached_property

from jobs.accounting import counts, queues

# Counting this many matching rows by index stays within a few milliseconds.
EXACT_COUNT_CAP = 10_000
# The changelist's query-string keys that the accounting answers exactly, and the keys that
# change the page, not the set of rows.
ACCOUNTED_FILTERS = {"status__exact": 2, "queue": 0, "task": 1}
NOT_FILTERS = {"p", "o", "e", "all", "_to_field", "_popup", "_facets"}


class ApproximateCount(int):
    """A count that is an estimate: shown with the word that says so."""

    prefix = "about"

    def __str__(self) -> str:
        return f"{self.prefix} {int(self):,}"


class AtLeastCount(ApproximateCount):
    prefix = "more than"


def request_counts(request) -> dict[tuple[str, str, str], int]:
    """Return the accounting's counts, read once per request (filters and count share them)."""
    if not hasattr(request, "_job_counts"):
        request._job_counts = counts.read()
    return request._job_counts


def registered_job_tasks() -> set[str]:
    """Return the names of the Celery tasks that run jobs (JobTask subclasses)."""
    from jobs.task import JobTask
    from project.celery import app

    return {name for name, task in app.tasks.items() if isinstance(task, JobTask)}


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        return [(name, name) for name in queues.queue_names(request_counts(request))]

    def queryset(self, request, queryset):
        return queryset.filter(queue=self.value()) if self.value() else queryset


class TaskFilter(admin.SimpleListFilter):
    title = "task"
    parameter_name = "task"

    def lookups(self, request, model_admin):
        names = registered_job_tasks() | {task for _, task, _ in request_counts(request)}
        return [(name, name) for name in sorted(names)]

    def queryset(self, request, queryset):
        return queryset.filter(task=self.value()) if self.value() else queryset


def accounted_filters(params) -> dict[int, str] | None:
    """Return ``{key position: value}`` when only accounted filters are set, else None."""
    found = {}
    for key, values in params.lists():
        if key in NOT_FILTERS:
            continue
        if key == "q":
            if any(value.strip() for value in values):
                return None
            continue
        if key not in ACCOUNTED_FILTERS or len(values) != 1:
            return None
        found[ACCOUNTED_FILTERS[key]] = values[0]
    return found


def accounted_count(found: dict[tuple[str, str, str], int], filters: dict[int, str]) -> int:
    """Sum the counts ``found`` over the (queue, task, status) keys matching ``filters``."""
    return sum(
        n
        for key, n in found.items()
        if all(key[position] == value for position, value in filters.items())
    )


def planner_estimate(queryset) -> int | None:
    """Return PostgreSQL's estimate of how many rows ``queryset`` returns (None elsewhere)."""
    if connection.vendor != "postgresql":
        return None
    sql, params = queryset.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])


class JobPaginator(Paginator):
    """A paginator whose ``count`` never counts the whole job table (see the module doc)."""

    def __init__(self, object_list, per_page, *, request, **kwargs):
        super().__init__(object_list, per_page, **kwargs)
        self.request = request
        self.filters = accounted_filters(request.GET)

    @cached_property
    def count(self) -> int:
        if self.filters is not None:
            return accounted_count(request_counts(self.request), self.filters)
        capped = self.object_list.order_by().values("pk")[: EXACT_COUNT_CAP + 1].count()
        if capped <= EXACT_COUNT_CAP:
            return capped
        estimate = planner_estimate(self.object_list)
        if estimate is None:
            return AtLeastCount(EXACT_COUNT_CAP)
        return ApproximateCount(max(estimate, EXACT_COUNT_CAP + 1))
