"""What an operator's retry of a workflow's node does to the node and to its workflow.

``retry_state(job_id)`` locks the node's workflow's row (shared) and the node's row, then
says where the retry puts it: back to ``waiting`` when it was cancelled while a dependency of
it had not ended yet (it runs once that dependency has, released as any dependant is, with
its outcomes), else ``queued``. The locks keep that answer true: a worker ending the
dependency locks the node's row before it asks whether the node is ready, so it either ended
before (its edge is done, and seen here) or waits for this transaction and finds the node
``waiting``; a cancel of the whole workflow takes the workflow's row first, so it either
committed before (the node then runs alone) or cancels the node it finds waiting.

Once the node has moved, ``retried(job)``

* gives a queued node its dependencies' outcomes as they are now (``"members"``,
  ``"previous"``), as a release would, whatever its condition says (the operator asked for it
  to run);
* lets what the node held back wait for it again (``resume``): its edges go back to not done
  for the dependants still waiting, and the dependants cancelled because of it (reason
  ``upstream``) wait again, theirs with them.

In a workflow cancelled as a whole the node runs alone, as it stands: it does not wait, and
nothing downstream waits for it again (those were cancelled with the workflow).
"""

import json

from django.db import connection
from django.db.models import Q

from jobs.models import Job, JobReason, JobStatus, Workflow
from jobs.transitions import transition
from jobs.workflows.inputs import as_stored, inputs_of
from jobs.workflows.release import EDGES, HOLDING, JOBS, waits

S = JobStatus
WORKFLOWS = Workflow._meta.db_table


def retry_state(job_id: int) -> str:
    """Lock ``job_id``'s workflow's row (shared), then the job's; return the state a retry
    moves it to (inside that transaction). A cancel of the whole workflow takes the
    workflow's row first too: it either committed before (and is seen here) or waits for
    this retry, and then cancels the node it finds waiting."""
    workflow_id = Job.objects.filter(pk=job_id).values_list("workflow_id", flat=True).first()
    if workflow_id is None:
        return S.QUEUED
    if connection.vendor == "postgresql":  # SQLite: one writer at a time, no lock to take
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {WORKFLOWS} WHERE id = %s FOR SHARE", [workflow_id])
    status = (
        Job.objects.select_for_update(no_key=True)
        .filter(pk=job_id)
        .values_list("status", flat=True)
        .first()
    )
    if status != S.CANCELLED or _cancelled(workflow_id):
        return S.QUEUED
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {waits('%s')}", [job_id])
        still_waits = cursor.fetchone()[0]
    return S.WAITING if still_waits else S.QUEUED


def retried(job: Job) -> Job:
    """``job`` was just moved by a retry (inside that transaction): give it its inputs if it
    is queued, let its dependants wait for it again; return it as it is now."""
    if job.workflow_id is None or _cancelled(job.workflow_id):
        return job
    if job.status == S.QUEUED:
        inputs = inputs_of(job.pk)
        if inputs.count:
            text = inputs.payload(job.payload)
            Job.objects.filter(pk=job.pk).update(payload=as_stored(text))
            job.payload = json.loads(text)
    resume(job)
    return job


def resume(job: Job) -> int:
    """Let what ``job`` held back wait for it again; return how many dependants wait again.

    A dependant that already ran (a callback under an "on complete" condition) is left as it
    is. A dependant of a range holding ``job`` that still waits needs nothing: ``job`` is
    unfinished again, which its range asks.
    """
    restored = 0
    todo = [(job.pk, job.workflow_id)]
    while todo:
        dependency, workflow_id = todo.pop()
        edges = f"SELECT id FROM {EDGES} WHERE dependency_id = %s"
        params = [dependency]
        if connection.vendor == "postgresql":  # SQLite has no range edges
            edges += f" UNION ALL {HOLDING}"
            params += [dependency, workflow_id]
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                # Its dependants' rows first, in id order, as a worker ending a dependency
                # of theirs locks them: that worker either decided before (and a dependant
                # it cancelled is found below, to wait again) or decides after, seeing the
                # edge not done.
                cursor.execute(
                    f"SELECT id FROM {JOBS} WHERE id IN (SELECT dependant_id FROM {EDGES} "
                    f"WHERE id IN ({edges})) ORDER BY id FOR NO KEY UPDATE",
                    params,
                )
            cursor.execute(
                f"UPDATE {EDGES} SET done = false WHERE id IN ({edges}) AND done "
                f"AND dependant_id IN (SELECT id FROM {JOBS} WHERE status = %s "
                "OR (status = %s AND reason = %s)) RETURNING dependant_id",
                [*params, S.WAITING, S.CANCELLED, JobReason.UPSTREAM],
            )
            dependants = sorted({row[0] for row in cursor.fetchall()})
        for dependant in dependants:
            moved = transition(
                Q(pk=dependant, reason=JobReason.UPSTREAM),
                S.WAITING,
                from_=[S.CANCELLED],
                reason="",
                last_error="",
                finished_at=None,
            )
            if moved:
                restored += 1
                todo.append((dependant, moved[0].workflow_id))
    return restored


def _cancelled(workflow_id: int) -> bool:
    return Workflow.objects.filter(pk=workflow_id, cancelled_at__isnull=False).exists()
