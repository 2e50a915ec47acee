"""A workflow: jobs that wait for other jobs (jobs.workflows), and the edges between them."""

from django.db import models
from django.db.models import Q


class FailureRule(models.TextChoices):
    """What a dependency that did not succeed does to the jobs that wait for it."""

    # Its dependants are cancelled (reason ``upstream``), and theirs in turn; a callback
    # that runs "on complete" still runs and sees the failure.
    FAIL = "fail", "Fail: cancel what depends on a failed job"
    # Its dependants run anyway and see the failure among their dependencies' outcomes.
    TOLERATE = "tolerate", "Tolerate: run dependants anyway"


class Condition(models.TextChoices):
    """When a waiting job runs, once all of its dependencies have ended."""

    # Every dependency succeeded (else it is cancelled, reason ``upstream``).
    SUCCESS = "success", "All succeeded"
    # Every dependency ended, however it ended.
    COMPLETE = "complete", "All ended"
    # At least one dependency ended dead or cancelled (else it is cancelled: not needed).
    FAILURE = "failure", "Any failed"


class Workflow(models.Model):
    """A graph of jobs enqueued together; its nodes are Job rows with ``workflow`` set.

    Its status is derived from its nodes when read (jobs.workflows.status_of): no row is
    written when a node ends, so members never take turns on the workflow's row.
    """

    name = models.CharField(max_length=200, blank=True, default="")
    failure_rule = models.CharField(
        max_length=16, choices=FailureRule.choices, default=FailureRule.FAIL
    )
    node_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    # Set by a cancel of the whole workflow (jobs.workflows.workflow_cancel).
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # What started it, as ``kind:id`` (``deployment:12``): ``enqueue(started_by=…)``. A
    # deployment's timeline shows the workflows it started (deployments.timeline).
    started_by = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The purge's walk through workflows past their retention.
            models.Index(fields=["created_at"], name="workflow_created_idx"),
            models.Index(
                fields=["started_by", "id"],
                condition=~Q(started_by=""),
                name="workflow_started_by_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"Workflow {self.pk} {self.name}".rstrip()


class JobDependency(models.Model):
    """``dependant`` waits for ``dependency`` to end, or for every job of a *range*.

    An edge to one ``dependency`` is ``done`` once that job has ended: written only by the
    transaction that records that end (and put back by a retry of it). A range edge (no
    ``dependency``; ``range_start`` and ``range_end`` set) waits for every job of its workflow
    whose id is in that range: a group's members, written one after another, as one edge, so
    their ends write no edge at all; whether one is left is asked of the index of workflows'
    unfinished jobs, and the edge is ``done`` once its dependant is decided (released or
    cancelled by its dependencies' ends). A workflow's ranges never overlap, but dependants
    may share one (jobs.workflows.rows.edges). The release check reads one dependant's
    not-done edges through the partial index, never a counter every member updates.

    The keys to jobs have no constraint in the database, nor has the key to the workflow (an
    edge is written only with its jobs and its workflow, by jobs.workflows.build, and a
    constraint's check on each of a 10,000-member chord's edges cost more than the insert):
    the purge's batch DELETE of finished jobs deletes their edges in the same statement
    (project.batch_delete follows these CASCADEs), as Django's own delete does. A range edge
    goes with its dependant only: its members may be purged one by one.
    """

    # Nothing done on the workflow's delete: an edge goes with its jobs (the keys above), and
    # a workflow is purged only once none of its jobs is left, so a cascade here would only
    # search the whole table (no index on this column) for edges that cannot be there.
    workflow = models.ForeignKey(
        Workflow,
        on_delete=models.DO_NOTHING,
        related_name="edges",
        db_constraint=False,
        db_index=False,
    )
    # Their own indexes would repeat the leading columns of the two below.
    dependant = models.ForeignKey(
        "jobs.Job", on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    dependency = models.ForeignKey(  # None: a range edge
        "jobs.Job",
        on_delete=models.CASCADE,
        related_name="+",
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
    )
    condition = models.CharField(
        max_length=16, choices=Condition.choices, default=Condition.SUCCESS
    )
    done = models.BooleanField(default=False)
    # A range edge's first and last job ids (both None for an edge to one ``dependency``).
    range_start = models.BigIntegerField(null=True, blank=True)
    range_end = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["dependency", "dependant"], name="job_dependency_unique"
            ),
        ]
        indexes = [
            # The release check: a dependant's edges still waiting.
            models.Index(fields=["dependant"], condition=Q(done=False), name="job_dep_waiting_idx"),
            # A dependant's inputs, in edge order (its outcomes under "members").
            models.Index(fields=["dependant", "id"], name="job_dep_dependant_idx"),
            # The range holding an ended member: the first of its workflow's ranges that
            # ends at or after the member (ranges never overlap).
            models.Index(
                fields=["workflow", "range_end"],
                condition=Q(range_end__isnull=False),
                name="job_dep_range_idx",
            ),
        ]

    def __str__(self) -> str:
        if self.range_end is not None:
            return f"job {self.dependant_id} waits for jobs {self.range_start}–{self.range_end}"
        return f"job {self.dependant_id} waits for job {self.dependency_id}"
