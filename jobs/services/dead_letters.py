"""A dead job's dead letter (audit row, staff notices, the job_dead signal), and notices."""

from django.contrib.auth import get_user_model

from jobs.models import AuditLog, Job, JobReason, Notification
from jobs.services.base import log_job
from jobs.signals import job_dead


def dead_letter(job: Job, *, actor: str) -> None:
    """Deliver ``job``'s dead letter: AuditLog row, staff notices, the ``job_dead`` signal.

    Call inside the transaction that buried the job, so all of it happens or none.
    """
    log_job("job.dead", job, reason=job.reason, error=job.last_error[:300])
    AuditLog.objects.create(
        actor=actor,
        action="job.dead",
        target_type="job",
        target_id=str(job.pk),
        details={
            "task": job.task,
            "attempts": job.attempts,
            "reason": job.reason,
            "error": job.last_error[:1000],
        },
    )
    notify_staff(
        topic=notice_topic(job),
        title=f"{job.task} job {job.pk} is dead after {job.attempts} attempt(s)",
        body=job.last_error[:2000],
        data={"job_id": job.pk, "task": job.task},
    )
    job_dead.send(sender=Job, job=job, reason=JobReason(job.reason or JobReason.PERMANENT))


def staff_ids() -> list[int]:
    """Return the ids of the active staff users: the operators every notice goes to."""
    return list(
        get_user_model().objects.filter(is_staff=True, is_active=True).values_list("pk", flat=True)
    )


def notify_staff(*, topic: str, title: str, body: str = "", data: dict | None = None) -> int:
    """Put one in-app Notification in every active staff user's inbox; return how many."""
    notices = Notification.objects.bulk_create(
        Notification(recipient_id=user_id, topic=topic, title=title, body=body, data=data or {})
        for user_id in staff_ids()
    )
    return len(notices)


def notice_topic(job: Job) -> str:
    """Name the in-app notice for a dead job: its owner's topic, else ``job.dead``."""
    from jobs.owners import owner_of  # the owners call these services: import when asked

    owner = owner_of(job.task)
    return owner.dead_notice_topic if owner is not None else "job.dead"
