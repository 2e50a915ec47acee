"""Per-queue reads for operators: the queues there are and the age of each one's oldest job."""

from datetime import datetime

from jobs.models import Job, JobStatus


def queue_names(counts: dict[tuple[str, str, str], int]) -> list[str]:
    """Return the declared queues plus every queue the accounting has jobs in, sorted."""
    from project.celery import QUEUES, django_task_queues

    return sorted({*QUEUES, *django_task_queues(), *(queue for queue, _, _ in counts)})


def oldest_queued(queues: list[str], *, now: datetime) -> dict[str, datetime]:
    """Return ``{queue: run_after}`` of the oldest due queued job of each queue that has one.

    One index lookup per queue (``ORDER BY run_after LIMIT 1`` on the runnable rows' index),
    instead of one ``min()`` over every queued row.
    """
    found = {}
    for queue in queues:
        first = (
            Job.objects.filter(queue=queue, status=JobStatus.QUEUED, run_after__lte=now)
            .order_by("run_after")
            .values_list("run_after", flat=True)
            .first()
        )
        if first is not None:
            found[queue] = first
    return found
