"""Domain errors of the deployments services; the API maps each to one HTTP status."""


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


class NotCancellable(DeploymentError):
    """The deployment has already finished (409)."""
