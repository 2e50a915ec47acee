"""Deployments' models: projects as configured, deployments as they ran, git workspaces."""

from deployments.models.deployments import (
    ACTIVE,
    FINISHED,
    NOT_STARTED,
    TRANSITIONS,
    Deployment,
    DeploymentEvent,
    DeploymentStatus,
    FailureReason,
    LogChunk,
    Recovery,
    RecoveryStatus,
    StepRun,
    StepStatus,
)
from deployments.models.environments import (
    Approval,
    ApprovalDecision,
    DeployLock,
    Environment,
)
from deployments.models.projects import (
    ConcurrencyPolicy,
    EnvironmentLock,
    Pipeline,
    Project,
    Step,
)
from deployments.models.workspaces import Deployer, Workspace, Worktree

__all__ = (
    "ACTIVE",
    "FINISHED",
    "NOT_STARTED",
    "TRANSITIONS",
    "Approval",
    "ApprovalDecision",
    "ConcurrencyPolicy",
    "DeployLock",
    "Deployer",
    "Deployment",
    "DeploymentEvent",
    "DeploymentStatus",
    "Environment",
    "EnvironmentLock",
    "FailureReason",
    "LogChunk",
    "Pipeline",
    "Project",
    "Recovery",
    "RecoveryStatus",
    "Step",
    "StepRun",
    "StepStatus",
    "Workspace",
    "Worktree",
)
