"""What a payload search looks at: a job's payload, less a workflow job's ``members``.

On PostgreSQL the Jobs list's payload filter (jobs.filters) and a django.tasks function's
jobs (jobs.task_names) are found by jsonb containment, ``searched @> '{"customer": …}'``,
answered by the GIN index ``job_payload_search_idx`` (``jsonb_path_ops``, migration 0028) on
the expression ``searched_payload()`` compiles to. A query must use that expression exactly,
or the index is not used.

The index leaves out a workflow job's ``members``: the outcomes of its dependencies, which the
engine writes into a callback's payload when it releases it (jobs.workflows.release). A
10,000-member chord's callback has a payload of a megabyte and 60,000 paths, and every change
of its row (its release, its claim, its end) would put all of them in the index again. An
operator finds those outcomes on the member jobs themselves. A job outside a workflow is
searched whole, a ``members`` key of its own included.
"""

from django.db.models import Case, F, Func, JSONField, Q, When
from django.db.models.fields.json import DataContains

# The key a workflow's engine writes (jobs.workflows.inputs.MEMBERS_KEY, not imported: the
# workflows import the job models, and this is read by the jobs list).
ENGINE_KEY = "members"


class _WithoutEngineKey(Func):
    """``payload - 'members'``, the key written into the SQL as the index has it (a bound
    parameter would not match the index under a server-side generic plan)."""

    arity = 1
    template = f"(%(expressions)s - '{ENGINE_KEY}')"
    output_field = JSONField()


def searched_payload() -> Case:
    """``CASE WHEN workflow_id IS NULL THEN payload ELSE payload - 'members' END``."""
    return Case(
        When(workflow__isnull=True, then=F("payload")),
        default=_WithoutEngineKey(F("payload")),
        output_field=JSONField(),
    )


def contains(value: dict) -> Q:
    """The jobs whose searched payload contains ``value`` (PostgreSQL's ``@>``)."""
    return Q(DataContains(searched_payload(), value))
