"""The Jobs list's search filters: payload content, error class, owner; typed, not chosen.

Each is a text box in the filter sidebar (``admin/jobs/job/text_filter.html``) whose value
is parsed here, never turned into an ORM lookup path, so no value can reach another field:

* **payload** ``key=value`` or a path ``customer.id=42`` (a leading ``$.`` is allowed). The
  value is read as JSON when it parses (``42``, ``true``, ``"42"``), else as text; a number
  or boolean also matches the same text (``42`` matches ``"42"``). On PostgreSQL it is a
  jsonb containment (``payload @> '{"customer": {"id": 42}}'``) answered by the GIN index
  ``job_payload_search_idx`` (jobs.payload_search: a workflow job's ``members`` are not
  searched); on SQLite a JSON1 path comparison, which reads every row the other filters
  leave.
  Offered to whoever may view jobs: the job page shows the whole payload to the same people
  (``can_filter_payload``), and a payload holds no field the console keeps secret.
* **error class** ``ValueError`` (or ``builtins.ValueError``): jobs whose ``last_error``
  starts with ``ValueError:``, which is how the last attempt's error is written
  (``jobs.attempts.describe``). The last error only, not every attempt's: one prefix
  comparison per row instead of a walk through each history.
* **owned by** ``deployment:12`` or ``endpoint:3``: the jobs an owning app says belong to
  that row (``jobs.owners.Owner.jobs_of``).
"""

import json
import math

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db import connection
from django.db.models import Q
from django.db.models.fields.json import KeyTransform

from jobs import owners, payload_search

# A path deeper than this, or a value longer, is refused as a bad filter.
MAX_PATH_DEPTH = 8
MAX_VALUE_LENGTH = 500
MAX_ID = 2**63 - 1  # a bigint: a larger id would be a database error, not "no such row"


def can_filter_payload(user) -> bool:
    """Whether ``user`` may filter by payload: whoever may see a job's payload on its page."""
    return bool(user and user.is_active and user.has_perm("jobs.view_job"))


def parse_payload(text: str) -> tuple[list[str], object]:
    """Split ``customer.id=42`` into (``["customer", "id"]``, 42); raise ValueError if bad."""
    path, sep, raw = text.partition("=")
    path = path.strip().removeprefix("$.")
    keys = [key.strip() for key in path.split(".")]
    if not sep or not all(keys) or len(keys) > MAX_PATH_DEPTH or len(raw) > MAX_VALUE_LENGTH:
        raise ValueError("a payload filter is key=value or a.b.c=value")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, (dict, list)) or (isinstance(value, float) and not math.isfinite(value)):
        value = raw  # a structure (or 1e999) is compared as the text it was written as
    if "\x00" in path or (isinstance(value, str) and "\x00" in value):
        raise ValueError("a payload filter cannot hold a NUL character")
    return keys, value


def _nested(keys: list[str], value) -> dict:
    for key in reversed(keys):
        value = {key: value}
    return value


def _candidates(value) -> list:
    """``value`` and, for a number or boolean, the same as text (42 also matches "42")."""
    if isinstance(value, str) or value is None:
        return [value]
    return [value, json.dumps(value)]


def payload_filter(queryset, text: str):
    """Return ``queryset`` narrowed to the payload filter ``text`` (see the module doc)."""
    try:
        keys, value = parse_payload(text)
    except ValueError as exc:
        raise IncorrectLookupParameters(str(exc)) from exc
    where = Q(pk__in=[])
    if connection.vendor == "postgresql":
        for item in _candidates(value):
            where |= payload_search.contains(_nested(keys, item))
        return queryset.filter(where)
    if keys[0] == payload_search.ENGINE_KEY:  # as PostgreSQL's index: not a workflow job's
        queryset = queryset.filter(workflow__isnull=True)
    expression = "payload"
    for key in keys:
        expression = KeyTransform(key, expression)
    for item in _candidates(value):
        where |= Q(_payload_at=item)
    return queryset.alias(_payload_at=expression).filter(where)


def error_class_filter(queryset, text: str):
    """Return ``queryset`` narrowed to jobs whose last error is of class ``text``."""
    name = text.strip().rsplit(".", 1)[-1]
    if not name or not name.replace("_", "").isalnum():
        raise IncorrectLookupParameters("an error class is a name such as ValueError")
    return queryset.filter(last_error__startswith=f"{name}:")


def owned_by_filter(queryset, text: str):
    """Return ``queryset`` narrowed to the jobs of one owner row, ``kind:id``."""
    kind, _, raw_id = text.strip().partition(":")
    if not (raw_id.strip().isascii() and raw_id.strip().isdigit()) or int(raw_id) > MAX_ID:
        raise IncorrectLookupParameters("an owner is kind:id, e.g. deployment:12")
    where = owners.jobs_of(kind.strip(), int(raw_id))
    if where is None:
        raise IncorrectLookupParameters(f"no owner kind {kind!r}: {', '.join(owners.kinds())}")
    return queryset.filter(where)


class TextFilter(admin.SimpleListFilter):
    """A filter whose value is typed into a box (its one query-string parameter)."""

    template = "admin/jobs/job/text_filter.html"
    placeholder = ""

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        self.text = (self.value() or "").strip()
        self.request = request

    def lookups(self, request, model_admin):
        return []

    def has_output(self) -> bool:
        return True

    def choices(self, changelist):
        """The other filters in force, kept as hidden fields of this filter's form."""
        others = changelist.get_filters_params()
        others.pop(self.parameter_name, None)
        if changelist.query:
            others["q"] = changelist.query
        yield {
            "hidden": [
                (key, item)
                for key, value in others.items()
                for item in (value if isinstance(value, list) else [value])
            ],
            "value": self.text,
            "name": self.parameter_name,
            "placeholder": self.placeholder,
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
        }

    def queryset(self, request, queryset):
        return self.apply(queryset, self.text) if self.text else queryset

    def apply(self, queryset, value: str):
        raise NotImplementedError


class PayloadFilter(TextFilter):
    title = "payload"
    parameter_name = "payload"
    placeholder = "customer.id=42"

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        if self.text and not can_filter_payload(request.user):
            raise IncorrectLookupParameters("filtering by payload is not allowed")

    def has_output(self) -> bool:
        return can_filter_payload(self.request.user)

    def apply(self, queryset, value: str):
        return payload_filter(queryset, value)


class ErrorClassFilter(TextFilter):
    title = "error class"
    parameter_name = "error_class"
    placeholder = "ValueError"

    def apply(self, queryset, value: str):
        return error_class_filter(queryset, value)


class OwnedByFilter(TextFilter):
    title = "owned by"
    parameter_name = "owned_by"
    placeholder = "deployment:12"

    def apply(self, queryset, value: str):
        return owned_by_filter(queryset, value)


class WorkflowFilter(TextFilter):
    """The jobs of one workflow (its id): the partial index on ``workflow``."""

    title = "workflow"
    parameter_name = "workflow"
    placeholder = "12"

    def apply(self, queryset, value: str):
        if not (value.isascii() and value.isdigit()) or int(value) > MAX_ID:
            raise IncorrectLookupParameters("a workflow is its id, e.g. 12")
        return queryset.filter(workflow_id=int(value))
