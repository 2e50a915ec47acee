"""Workflow fixtures: workers that also know the workflow tests' tasks."""

import pytest
from django.db import transaction

import tests.workflows.tasks  # noqa: F401 - registers the tasks in this process too
from jobs.models import Job, JobDependency, JobStatus
from tests.processes import wait_until

INCLUDE = "tests.jobtasks,tests.workflows.tasks"


@pytest.fixture
def flow_worker(start_worker):
    """Start a real worker on the default queue that knows the workflow tasks."""

    def start(*, concurrency: int = 2, **kwargs):
        return start_worker(queues="default", concurrency=concurrency, include=INCLUDE, **kwargs)

    return start


def enqueue(piece, **options):
    """Enqueue ``piece`` in a transaction of its own, as a caller would."""
    with transaction.atomic():
        return piece.enqueue(**options)


def wait_finished(workflow, *, timeout: float = 60) -> list[Job]:
    """Wait until every node of ``workflow`` has ended; return them, oldest first."""

    def done():
        jobs = list(Job.objects.filter(workflow=workflow).order_by("id"))
        return jobs if all(job.is_finished for job in jobs) else None

    return wait_until(done, timeout=timeout, message=f"workflow {workflow.pk} to finish")


def assert_order(workflow) -> None:
    """No dependant started before each of its dependencies had finished (a claim is stamped
    with the database's clock as it runs: jobs.statements.CLOCK); every edge is done, a
    range edge for each of its members."""
    jobs = {job.pk: job for job in Job.objects.filter(workflow=workflow)}
    edges = JobDependency.objects.filter(workflow=workflow)
    for edge in edges:
        assert edge.done, edge
        first, last = (
            (edge.dependency_id,) * 2
            if edge.range_end is None
            else (
                edge.range_start,
                edge.range_end,
            )
        )
        dependant = jobs[edge.dependant_id]
        members = [jobs[pk] for pk in sorted(jobs) if first <= pk <= last]
        assert members and (members[0].pk, members[-1].pk) == (first, last), edge
        for dependency in members:
            if dependant.started_at is None:
                assert dependant.status == JobStatus.CANCELLED
                continue
            assert dependency.finished_at is not None
            assert dependency.finished_at <= dependant.started_at, (
                dependency.pk,
                dependant.pk,
            )
