"""Which named constraint an ``IntegrityError`` broke, so a caller maps only that one.

A service that turns a collision into a domain answer (an idempotent repeat, a live unique
job) must not turn every integrity error into it: an unrelated foreign-key or check failure
is a bug and propagates. As Procrastinate checks ``constraint_name``, a caller asks
``violates(exc, Model, "constraint_name")`` and re-raises otherwise.
"""

import re

from django.db import IntegrityError, models

# SQLite names the columns of a unique violation ("UNIQUE constraint failed: t.a, t.b") or,
# for an index on expressions, the index ("UNIQUE constraint failed: index 'name'").
_SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: (?:index '([^']+)'|(.+))$")


def violates(exc: IntegrityError, model: type[models.Model], name: str) -> bool:
    """Whether ``exc`` is a violation of ``model``'s constraint called ``name``."""
    constraint = _declared(model, name)
    diag = getattr(exc.__cause__, "diag", None)
    if diag is not None:  # PostgreSQL names the constraint (or unique index) it checked
        return diag.constraint_name == name
    match = _SQLITE_UNIQUE.search(str(exc))
    if match is None or not isinstance(constraint, models.UniqueConstraint):
        return False
    index, columns = match.groups()
    if index is not None:
        return index == name
    table = model._meta.db_table
    named = {part.strip() for part in columns.split(",")}
    return named == {f"{table}.{model._meta.get_field(f).column}" for f in constraint.fields}


def _declared(model: type[models.Model], name: str) -> models.BaseConstraint:
    """``model``'s constraint ``name``; a name it doesn't declare is a programming error."""
    for constraint in model._meta.constraints:
        if constraint.name == name:
            return constraint
    raise LookupError(f"{model.__name__} declares no constraint {name!r}")
