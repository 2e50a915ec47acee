"""``django.tasks`` functions used by the tests (a worker imports them by path)."""

import asyncio

from django.tasks import task

from jobs.models import AuditLog


@task
def add(x: int, y: int) -> int:
    return x + y


@task
async def add_async(x: int, y: int) -> int:
    await asyncio.sleep(0)
    return x + y


@task
def fails(message: str) -> None:
    raise ValueError(message)


@task
def exits() -> None:
    raise SystemExit(3)


@task
def interrupts() -> None:
    raise KeyboardInterrupt


@task(takes_context=True)
def flaky(context, failures: int) -> dict:
    """Fail the first ``failures`` attempts, then report what the context said."""
    if context.attempt <= failures:
        raise ConnectionError(f"attempt {context.attempt} fails")
    return {"attempt": context.attempt, "id": context.task_result.id}


@task
def send_email(to: str) -> str:
    AuditLog.objects.create(actor="test", action="test.email", target_type="email", target_id=to)
    return to
