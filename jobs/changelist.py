"""The Jobs changelist at scale: filter choices and page counts that never scan ``jobs_job``.

* **Filter choices** for queue and task come from the declared queues and the registered
  job tasks, plus whatever the accounting has jobs of, not from ``DISTINCT`` over the table.
* **The count** under the list is exact from the accounting when the only filters are
  status, queue and task (or none); otherwise exact by a capped count
  (``SELECT count(*) FROM (… LIMIT cap + 1)``) when at most ``EXACT_COUNT_CAP`` rows match;
  beyond that PostgreSQL's planner estimate, shown as "about N" (on SQLite "more than N").
* **The rows** are rendered by ``page_rows`` in one pass, one string per row: what Django's
  ``result_list`` works out again for every cell of every row (the change URL reversed and
  resolved, the checkbox widget's template, the empty-value text, date formats) is worked
  out once per page. 50 jobs then take about 2 ms to render instead of 30-40 ms, most of the
  page's time (``tests/jobs/test_changelist.py``; docs/benchmarks.md, Scale).
"""

import html
import json
from datetime import datetime, tzinfo

from django.contrib import admin
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import display_for_field, display_for_value
from django.core.exceptions import FieldDoesNotExist
from django.core.paginator import Paginator
from django.db import connection, models
from django.urls import NoReverseMatch
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

from jobs.accounting import counts, queues
from project import times
from project.admin_urls import url_per_pk

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
        return capped_count(self.object_list)


def capped_count(queryset) -> int:
    """Count ``queryset`` exactly up to ``EXACT_COUNT_CAP`` rows, estimate beyond (module doc)."""
    capped = queryset.order_by().values("pk")[: EXACT_COUNT_CAP + 1].count()
    if capped <= EXACT_COUNT_CAP:
        return capped
    estimate = planner_estimate(queryset)
    if estimate is None:
        return AtLeastCount(EXACT_COUNT_CAP)
    return ApproximateCount(max(estimate, EXACT_COUNT_CAP + 1))


# Fields whose value the page shows as its text, escaped (Django's display_for_field does no
# more for them); any other field goes through display_for_field, times as project.times.
PLAIN_FIELDS = (models.CharField, models.TextField, models.IntegerField)


def to_the_second(when: datetime | None, zone: tzinfo | None = None) -> str:
    """Show ``when`` as every console page does (project.times: local, UTC on hover), or "—"."""
    return times.moment(when, zone)


def _text(value, empty: str) -> str:
    """``value`` as cell HTML: safe strings as they are, the rest escaped, blank as ``empty``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return empty
    if isinstance(value, SafeString):
        return value
    return html.escape(str(value))


def _field(cl, name: str) -> models.Field | None:
    try:
        return cl.lookup_opts.get_field(name)
    except FieldDoesNotExist:
        return None


def _content(cl, name: str, empty: str, zone: tzinfo):
    """Return ``row -> the cell's content as HTML`` for one column, or None (Django's job)."""
    field = _field(cl, name)
    if field is None:
        method = getattr(cl.model_admin, name, None) if name != "__str__" else None
        if not callable(method) or getattr(method, "boolean", False):
            return None  # a model method or property, a boolean icon: not on this page
        empty = getattr(method, "empty_value_display", empty)

        def shown(row) -> str:
            value = method(row)
            if not isinstance(value, str):  # numbers, dates, lists: as Django shows them
                value = display_for_value(value, empty)
            return _text(value, empty)

        return shown
    if field.is_relation:
        return None
    attname = field.attname
    if isinstance(field, PLAIN_FIELDS) and not field.choices:
        return lambda row: _text(getattr(row, attname), empty)
    if isinstance(field, models.DateTimeField):

        def moment(row) -> str:
            value = getattr(row, attname)
            return empty if value is None else to_the_second(value, zone)

        return moment
    return lambda row: _text(display_for_field(getattr(row, attname), field, empty), empty)


def _checkbox():
    # The markup Django's CheckboxInput renders for action_checkbox, without its template.
    label = gettext("Select this object for an action - {}")

    def render(row) -> str:
        value = html.escape(str(row.pk))
        text = label.format(html.escape(str(row)))
        return (
            f'<td class="action-checkbox"><input type="checkbox" name="_selected_action" '
            f'value="{value}" class="action-select" aria-label="{text}"></td>'
        )

    return render


def _change_url(cl):
    """Return ``pk -> the row's change URL`` (with the list's filters), reversed once, or None."""
    context = {"preserved_filters": cl.preserved_filters, "opts": cl.opts}
    try:
        return url_per_pk(
            f"admin:{cl.opts.app_label}_{cl.opts.model_name}_change",
            current_app=cl.model_admin.admin_site.name,
            adjust=lambda url: add_preserved_filters(context, url),
        )
    except NoReverseMatch:
        return None


def _cell(cl, name: str, empty: str, zone: tzinfo):
    """Return ``row -> the whole cell`` (``<td>``, or ``<th>`` for the first link), or None."""
    if name == "action_checkbox":
        return _checkbox()
    content = _content(cl, name, empty, zone)
    if content is None:
        return None
    # Django's classes: the column's name, and nowrap for a date or a time.
    nowrap = isinstance(_field(cl, name), (models.DateField, models.TimeField))
    css = f"field-{name} nowrap" if nowrap else f"field-{name}"
    if name not in cl.list_display_links:
        return lambda row: f'<td class="{css}">{content(row)}</td>'
    url = _change_url(cl)
    if url is None:
        return None
    first = next(n for n in cl.list_display if n in cl.list_display_links) == name
    tag = "th" if first else "td"
    return lambda row: (
        f'<{tag} class="{css}"><a href="{html.escape(url(row.pk))}">{content(row)}</a></{tag}>'
    )


def page_rows(cl) -> list[SafeString] | None:
    """Render the page's rows, one HTML string each (see the module doc).

    None where Django's own ``result_list`` must render them: an editable list, a popup, a
    link to another field, no link column or a column that is not a field or a display
    method of the admin.
    """
    if getattr(cl, "formset", None) or cl.is_popup or cl.to_field or not cl.list_display_links:
        return None
    empty = cl.model_admin.get_empty_value_display()
    zone = timezone.get_current_timezone()
    cells = [_cell(cl, name, empty, zone) for name in cl.list_display]
    if any(cell is None for cell in cells):
        return None
    return [mark_safe("".join(cell(row) for cell in cells)) for row in cl.result_list]
