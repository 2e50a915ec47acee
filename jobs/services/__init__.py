"""The job engine's services. Views, admin actions, commands and tasks all call these.

Each state change goes through ``jobs.transitions.transition`` and logs one structured line.
"""

from jobs.services.base import log_job
from jobs.services.dead_letters import (
    dead_letter,
    notice_topic,
    notify_staff,
    staff_ids,
)
from jobs.services.enqueue import enqueue, enqueue_many, validate_priority
from jobs.services.operator import job_cancel, job_retry, job_supersede
from jobs.services.runs import (
    CLAIM_CLOCK_SKEW,
    job_bury,
    job_claim,
    job_heartbeat,
    job_snooze,
    job_wake,
)

__all__ = [
    "CLAIM_CLOCK_SKEW",
    "dead_letter",
    "enqueue",
    "enqueue_many",
    "job_bury",
    "job_cancel",
    "job_claim",
    "job_heartbeat",
    "job_retry",
    "job_snooze",
    "job_supersede",
    "job_wake",
    "log_job",
    "notice_topic",
    "notify_staff",
    "staff_ids",
    "validate_priority",
]
