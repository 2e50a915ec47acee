"""The plain Django project's only task."""

from celery import shared_task

from bench.counting import count


@shared_task(name="baseline.noop", ignore_result=True, acks_late=True)
def noop() -> None:
    """Do nothing but count the run, exactly as ``bench.raw_noop`` does."""
    count("bench:baseline_noop")
