"""Domain errors of the deployments services; the API maps each to one HTTP status."""

from project.times import api_text


class DeploymentError(Exception):
    """Base class: a request the deployments services turned down."""


class ProjectNotFound(DeploymentError):
    """No project has that slug (404)."""


class PipelineNotFound(DeploymentError):
    """The project has no pipeline of that name (404)."""


class DeploymentNotFound(DeploymentError):
    """No deployment has that id (404)."""


class InvalidRequest(DeploymentError):
    """A field of the request is not acceptable (400/422); ``field`` names it."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class IdempotencyConflict(DeploymentError):
    """The idempotency key was used before with a different request (422)."""


class NotRetryable(DeploymentError):
    """Only a finished deployment can be retried (409)."""


class NotRecoverable(DeploymentError):
    """Only a finished deployment has failures after it to recover (409)."""


class NotCancellable(DeploymentError):
    """The deployment has already finished (409)."""


class EnvironmentFrozen(DeploymentError):
    """A freeze window is open on the environment (409); ``window`` says which."""

    def __init__(self, message: str, *, window) -> None:
        super().__init__(message)
        self.window = window
        self.details = {
            "window": window.name,
            "opened_at": api_text(window.opened_at),
            "closes_at": api_text(window.closes_at),
        }


class EnvironmentNotFound(DeploymentError):
    """The project has no such environment: no rules and no deployments (404)."""


class NothingToRollBack(DeploymentError):
    """The environment has no earlier successful deployment to go back to (409)."""


class NotRollbackTarget(DeploymentError):
    """The deployment asked for cannot be rolled back to: it failed, or is current (409)."""


class NotWaitingApproval(DeploymentError):
    """The deployment is not waiting for approval (any more) (409)."""


class AlreadyDecided(DeploymentError):
    """This approver already approved or rejected the deployment (409)."""


class ApprovalRefused(DeploymentError):
    """This approver may not decide on the deployment (self-approval, not an approver) (403)."""


class UndeclaredEnvironment(InvalidRequest):
    """The project declares its environments and this is not one of them (422)."""

    def __init__(self, message: str, *, declared: list[str]) -> None:
        super().__init__(message, field="environment")
        self.details = {
            "fields": [{"field": "body.environment", "message": message}],
            "declared": declared,
        }


class RefNotAllowed(DeploymentError):
    """The environment's ``refs`` rule does not admit this ref (422); ``details`` names it."""

    def __init__(self, message: str, *, ref: str, allowed: list[str]) -> None:
        super().__init__(message)
        self.details = {"ref": ref, "allowed_refs": allowed}


class EnvironmentLocked(DeploymentError):
    """Someone holds a deploy lock on the environment (409); ``details`` say who and why."""

    def __init__(self, message: str, *, lock) -> None:
        super().__init__(message)
        self.details = {
            "locked_by": lock.locked_by,
            "reason": lock.reason,
            "locked_at": api_text(lock.locked_at),
            "expires_at": api_text(lock.expires_at) if lock.expires_at else None,
        }


class RecoveryInProgress(DeploymentError):
    """A recovery of the deployment is still queued or running (409)."""


class NotLocked(DeploymentError):
    """The environment holds no deploy lock to release (404)."""


class NotLockHolder(DeploymentError):
    """Only whoever took a deploy lock, or an admin, may release it (403)."""
