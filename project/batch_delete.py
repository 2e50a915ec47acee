"""Delete the rows of a queryset in short batches, each batch one statement on PostgreSQL.

Every purge (finished jobs, webhook deliveries and events, deployment logs, maintenance
records) goes through ``delete_in_batches``, as River's cleaner does it:

* **One statement per batch.** ``DELETE … WHERE <filter> AND pk IN (SELECT pk … WHERE
  <filter> ORDER BY <column> LIMIT n)``, on the column the caller's index sorts, so the
  choice reads only the rows it deletes. The filter is checked again on every row the DELETE
  reaches: a row another transaction is changing (a job being retried, a delivery being
  replayed) is waited for, re-checked once that transaction commits, and kept when it no
  longer matches. No row is locked before it is deleted (a ``FOR UPDATE`` would write each
  row twice).
* **Dependent rows in SQL.** Rows that point at a deleted row (``RETURNING`` its key) are
  handled in the same statement, as each foreign key's ``on_delete`` asks: ``SET_NULL``
  becomes an ``UPDATE … SET col = NULL``, ``CASCADE`` a ``DELETE`` (and so on down its own
  dependents),
  ``DO_NOTHING`` nothing. No full row is ever fetched, no ``pre_delete``/``post_delete``
  signal is sent (the one receiver of a purged model, a Workflow's refusal while a job of
  it is left, cannot apply: the purge takes only workflows with no job left).
* **Short batches, short pauses.** ``BATCH_SIZE`` rows a statement (a few milliseconds on
  its index; a batch over ``STATEMENT_TARGET_SECONDS`` halves the next, a fast one doubles
  it back), each batch starting at the greatest ``order_by`` of the one before (so no
  batch walks the index entries of rows already deleted and not yet vacuumed),
  ``PAUSE_BETWEEN_BATCHES`` between statements so a long catch-up leaves room
  for the workers' writes, and the loop stops at the first batch that comes back short.

Elsewhere (SQLite, the embedded default, which has no data-modifying ``WITH``) a batch is a
few statements in one transaction: the batch's ids (integers only), the dependents' updates
and deletes by those ids, then the delete, with the queryset's filter applied again.
"""

import time
from collections import Counter

from django.db import connections, models, transaction
from django.db.models import QuerySet, sql
from django.db.models.deletion import get_candidate_relations_to_delete

BATCH_SIZE = 1000
# Seconds between two batches: long enough for waiting writers to get their row locks and
# for autovacuum to keep up, short enough that 1,000 rows a batch still runs at tens of
# thousands of rows a second.
PAUSE_BETWEEN_BATCHES = 0.02
# Cascades deeper than this are refused rather than followed (a self-referencing CASCADE).
MAX_CASCADE_DEPTH = 4
# A batch that took longer than this (100 ms) halves the next one (down to MIN_BATCH_SIZE); one that
# took under a quarter of it doubles the next (up to the batch size asked for). Rows whose
# heap pages are not cached (a catch-up through old history) cost a read each.
STATEMENT_TARGET_SECONDS = 0.1
MIN_BATCH_SIZE = 50


def delete_in_batches(
    queryset: QuerySet,
    *,
    order_by: str,
    batch_size: int = BATCH_SIZE,
    pause: float = PAUSE_BETWEEN_BATCHES,
    cascaded: Counter | None = None,
    choose: models.Q | None = None,
) -> int:
    """Delete the rows of ``queryset`` oldest ``order_by`` first; return how many went.

    ``order_by`` names the column an index of the filter sorts, so each batch reads only
    the rows it deletes; the filter must keep it non-null (e.g. ``finished_at__lt=…``), as
    each batch after the first asks for ``order_by >=`` the last one's greatest value. Rows
    of other models deleted by cascade are added to ``cascaded`` (by model label) when it is
    given. ``choose``: a further condition on which rows a batch chooses, not checked again
    on each row deleted. For a condition on other rows than the one deleted (a re-check
    would read them in the same snapshot anyway), whose subquery would otherwise mislead the
    planner into scanning every row the filter matches to delete a batch of them.
    """
    deleted = 0
    remaining = queryset
    size = batch_size
    while True:
        started = time.monotonic()
        counts, last = delete_batch(remaining, order_by=order_by, batch_size=size, choose=choose)
        took = time.monotonic() - started
        count = counts.pop(queryset.model._meta.label, 0)
        deleted += count
        if cascaded is not None:
            cascaded.update(counts)
        if count < size:
            return deleted
        size = next_batch_size(size, took, batch_size)
        # The next batch starts where this one ended, not at the start of the index, where
        # the entries of the rows just deleted wait for a vacuum.
        if last is not None:
            remaining = queryset.filter(**{f"{order_by}__gte": last})
        if pause:
            time.sleep(pause)


def next_batch_size(size: int, took: float, most: int) -> int:
    """The size of the batch after one of ``size`` rows that took ``took`` seconds."""
    if took > STATEMENT_TARGET_SECONDS:
        return max(min(MIN_BATCH_SIZE, most), size // 2)
    if took < STATEMENT_TARGET_SECONDS / 4:
        return min(most, size * 2)
    return size


def delete_batch(
    queryset: QuerySet,
    *,
    order_by: str,
    batch_size: int = BATCH_SIZE,
    choose: models.Q | None = None,
) -> tuple[Counter, object]:
    """Delete one batch of at most ``batch_size`` rows of ``queryset`` (chosen among those
    ``choose`` also holds for, if given: see ``delete_in_batches``).

    Return the rows deleted by model, and the greatest ``order_by`` among them (None if none).
    """
    connection = connections[queryset.db]
    with transaction.atomic(using=queryset.db):
        chosen = queryset.filter(choose) if choose is not None else queryset
        if connection.vendor == "postgresql":
            return _delete_in_one_statement(queryset, chosen, order_by, batch_size)
        return _delete_by_ids(queryset, chosen, order_by, batch_size)


def _dependents(model: type[models.Model], depth: int = 0) -> list[tuple]:
    """Return ``(relation, children)`` for every foreign key into ``model`` that acts on delete."""
    if depth > MAX_CASCADE_DEPTH:
        raise ValueError(f"{model._meta.label}: cascade deeper than {MAX_CASCADE_DEPTH}")
    found = []
    for relation in get_candidate_relations_to_delete(model._meta):
        action = relation.on_delete
        if action is models.DO_NOTHING:
            continue
        if relation.field.target_field != model._meta.pk:
            raise ValueError(f"{relation.field}: batch delete needs a key to the primary key")
        if action is models.SET_NULL:
            found.append((relation, []))
        elif action is models.CASCADE:
            found.append((relation, _dependents(relation.related_model, depth + 1)))
        else:
            raise ValueError(f"{relation.field}: batch delete cannot apply {action.__name__}")
    return found


def _delete_in_one_statement(
    queryset: QuerySet, choice: QuerySet, order_by: str, batch_size: int
) -> tuple[Counter, object]:
    connection = connections[queryset.db]
    quote = connection.ops.quote_name
    model = queryset.model
    pk = quote(model._meta.pk.column)
    # Django's own DELETE of "the filter, and among the first n by order_by": the filter is
    # checked twice, in the choice and again on each row the DELETE reaches.
    chosen = choice.order_by(order_by).values("pk")[:batch_size]
    query = queryset.filter(pk__in=chosen).order_by().query.clone()
    query.__class__ = sql.DeleteQuery
    delete_sql, params = query.get_compiler(queryset.db).as_sql()
    key = quote(model._meta.get_field(order_by).column)
    ctes = [f"gone(id, key) AS ({delete_sql} RETURNING {pk}, {key})"]
    counted = [(model._meta.label, "gone")]  # (model label, CTE name) of every DELETE

    def add(source: str, dependents: list[tuple]) -> None:
        for relation, children in dependents:
            table = quote(relation.related_model._meta.db_table)
            column = quote(relation.field.column)
            name = f"dependent_{len(ctes)}"
            if relation.on_delete is models.SET_NULL:
                ctes.append(
                    f"{name} AS (UPDATE {table} SET {column} = NULL "
                    f"WHERE {column} IN (SELECT id FROM {source}))"
                )
                continue
            child_pk = quote(relation.related_model._meta.pk.column)
            ctes.append(
                f"{name}(id) AS (DELETE FROM {table} WHERE {column} IN "
                f"(SELECT id FROM {source}) RETURNING {child_pk})"
            )
            counted.append((relation.related_model._meta.label, name))
            add(name, children)

    add("gone", _dependents(model))
    totals = ", ".join(f"(SELECT count(*) FROM {name})" for _, name in counted)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH {', '.join(ctes)} SELECT (SELECT max(key) FROM gone), {totals}", params
        )
        last, *row = cursor.fetchone()
    counts = Counter()
    for (label, _), count in zip(counted, row, strict=True):
        counts[label] += count
    return counts, last


def _delete_by_ids(
    queryset: QuerySet, choice: QuerySet, order_by: str, batch_size: int
) -> tuple[Counter, object]:
    counts = Counter()
    chosen = list(choice.order_by(order_by).values_list("pk", order_by)[:batch_size])
    if not chosen:
        return counts, None
    ids = [pk for pk, _ in chosen]

    def apply(model: type[models.Model], keys: list, dependents: list[tuple]) -> None:
        for relation, children in dependents:
            rows = relation.related_model._base_manager.filter(
                **{f"{relation.field.name}__in": keys}
            ).order_by()
            if relation.on_delete is models.SET_NULL:
                rows.update(**{relation.field.name: None})
                continue
            child_keys = list(rows.values_list("pk", flat=True))
            if child_keys:
                apply(relation.related_model, child_keys, children)
                counts[relation.related_model._meta.label] += _raw_delete(
                    relation.related_model._base_manager.filter(pk__in=child_keys)
                )

    apply(queryset.model, ids, _dependents(queryset.model))
    counts[queryset.model._meta.label] += _raw_delete(queryset.filter(pk__in=ids).order_by())
    return counts, chosen[-1][1]


def _raw_delete(queryset: QuerySet) -> int:
    """Issue one ``DELETE … WHERE <filter>`` (Django's fast-delete path, no collector)."""
    return queryset._raw_delete(queryset.db)
