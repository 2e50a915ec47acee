"""The job engine's models, one concern per module: jobs, audit, upkeep, counts, control, bulk,
workflows."""

from jobs.models.accounting import (
    JobCount,
    JobCountDelta,
    JobMinuteStats,
    JobTally,
    JobTallyDelta,
)
from jobs.models.audit import AuditLog, Notification
from jobs.models.bulk import BulkAction, BulkOperation, BulkStatus
from jobs.models.control import LimitKeyState, QueueState, TaskState
from jobs.models.job import (
    DEAD_LETTER,
    FINISHED,
    MAX_BACKOFF_DOUBLINGS,
    PENDING,
    TRANSITIONS,
    UNFINISHED,
    UNIQUE_CONSTRAINT,
    UNIQUE_LIVE,
    Job,
    JobReason,
    JobStatus,
)
from jobs.models.maintenance import MaintenanceLock, MaintenanceRun, WorkerHeartbeat
from jobs.models.schedule import Schedule, ScheduleRun, ScheduleRunKind
from jobs.models.workflow import Condition, FailureRule, JobDependency, Workflow

__all__ = (
    "DEAD_LETTER",
    "FINISHED",
    "MAX_BACKOFF_DOUBLINGS",
    "PENDING",
    "TRANSITIONS",
    "UNIQUE_CONSTRAINT",
    "UNFINISHED",
    "UNIQUE_LIVE",
    "AuditLog",
    "BulkAction",
    "BulkOperation",
    "BulkStatus",
    "Condition",
    "FailureRule",
    "Job",
    "JobCount",
    "JobCountDelta",
    "JobDependency",
    "JobMinuteStats",
    "JobReason",
    "JobStatus",
    "JobTally",
    "JobTallyDelta",
    "LimitKeyState",
    "MaintenanceLock",
    "MaintenanceRun",
    "Notification",
    "QueueState",
    "Schedule",
    "ScheduleRun",
    "ScheduleRunKind",
    "TaskState",
    "WorkerHeartbeat",
    "Workflow",
)
