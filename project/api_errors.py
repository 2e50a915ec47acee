"""The one error shape of the REST API: ``{"error": {"code", "message", "details"}}``."""

import logging

from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import Http404
from ninja.errors import AuthenticationError, HttpError, ValidationError

from deployments import errors as deployment_errors
from jobs.errors import IllegalTransition, JobNotFound
from webhooks.errors import WebhookError

logger = logging.getLogger("api")


class ApiError(Exception):
    """Raise from a view to answer with ``status`` and the error shape."""

    def __init__(self, status: int, code: str, message: str, details=None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details


def error_body(code: str, message: str, details=None) -> dict:
    return {
        "error": {
            "code": code,
            "message": message,
            "details": details if details is not None else {},
        }
    }


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    422: "invalid",
    429: "too_many_requests",
}


_DEPLOYMENT_ERRORS = {
    deployment_errors.ProjectNotFound: (404, "not_found"),
    deployment_errors.PipelineNotFound: (422, "invalid"),  # a field of the body names it
    deployment_errors.DeploymentNotFound: (404, "not_found"),
    deployment_errors.InvalidRequest: (422, "invalid"),
    deployment_errors.IdempotencyConflict: (422, "idempotency_conflict"),
    deployment_errors.NotRetryable: (409, "conflict"),
    deployment_errors.NotCancellable: (409, "conflict"),
    deployment_errors.NotRecoverable: (409, "conflict"),
    deployment_errors.EnvironmentFrozen: (409, "environment_frozen"),
    deployment_errors.EnvironmentNotFound: (404, "not_found"),
    deployment_errors.NothingToRollBack: (409, "nothing_to_roll_back"),
    deployment_errors.NotRollbackTarget: (409, "conflict"),
    deployment_errors.NotWaitingApproval: (409, "conflict"),
    deployment_errors.AlreadyDecided: (409, "already_decided"),
    deployment_errors.ApprovalRefused: (403, "forbidden"),
    deployment_errors.UndeclaredEnvironment: (422, "invalid"),
    deployment_errors.RefNotAllowed: (422, "ref_not_allowed"),
    deployment_errors.EnvironmentLocked: (409, "environment_locked"),
    deployment_errors.NotLocked: (404, "not_found"),
    deployment_errors.RecoveryInProgress: (409, "conflict"),
    deployment_errors.NotLockHolder: (403, "forbidden"),
}


def _field_errors(errors: list[dict]) -> list[dict]:
    """Turn pydantic errors into ``[{"field": "body.ref", "message": ...}]``."""
    found = []
    for error in errors:
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "payload")
        found.append(
            {
                "field": location,
                "message": error.get("msg", "invalid"),
                "type": error.get("type", ""),
            }
        )
    return found


def install(api) -> None:
    """Register handlers so every error the API can raise takes the one shape."""

    def respond(request, status: int, code: str, message: str, details=None):
        return api.create_response(request, error_body(code, message, details), status=status)

    @api.exception_handler(ApiError)
    def on_api_error(request, exc: ApiError):
        return respond(request, exc.status, exc.code, exc.message, exc.details)

    @api.exception_handler(ValidationError)
    def on_validation(request, exc: ValidationError):
        fields = _field_errors(exc.errors)
        message = "; ".join(f"{f['field']}: {f['message']}" for f in fields) or "invalid request"
        return respond(request, 422, "invalid", message, {"fields": fields})

    @api.exception_handler(AuthenticationError)
    def on_unauthenticated(request, exc):
        return respond(request, 401, "unauthorized", "a valid bearer token is required")

    @api.exception_handler(HttpError)
    def on_http_error(request, exc: HttpError):
        if isinstance(exc.__cause__, RequestDataTooBig):
            return respond(request, 413, "payload_too_large", "the request body is too large")
        status = exc.status_code
        return respond(request, status, _HTTP_CODES.get(status, "error"), str(exc))

    @api.exception_handler(RequestDataTooBig)
    def on_too_big(request, exc):
        return respond(request, 413, "payload_too_large", "the request body is over 1 MiB")

    @api.exception_handler(DataError)
    def on_unstorable(request, exc):
        return respond(
            request,
            422,
            "invalid",
            "a value cannot be stored (a NUL character, NaN or a number out of range)",
        )

    @api.exception_handler(Http404)
    def on_not_found(request, exc):
        return respond(request, 404, "not_found", str(exc) or "not found")

    @api.exception_handler(JobNotFound)
    def on_job_not_found(request, exc):
        return respond(request, 404, "not_found", str(exc))

    @api.exception_handler(IllegalTransition)
    def on_conflict(request, exc):
        return respond(request, 409, "conflict", str(exc))

    @api.exception_handler(deployment_errors.DeploymentError)
    def on_deployment_error(request, exc: deployment_errors.DeploymentError):
        status, code = _DEPLOYMENT_ERRORS.get(type(exc), (422, "invalid"))
        field = getattr(exc, "field", "") or (
            "pipeline" if status == 422 and "pipeline" in str(exc) else ""
        )
        details = {"fields": [{"field": f"body.{field}", "message": str(exc)}]} if field else None
        details = getattr(exc, "details", None) or details
        return respond(request, status, code, str(exc), details)

    @api.exception_handler(WebhookError)
    def on_webhook_error(request, exc: WebhookError):
        details = None
        if exc.http_status == 422:
            field = {"unknown_topic": "body.topics", "unsafe_url": "body.url"}.get(exc.code)
            details = {"fields": [{"field": field, "message": str(exc)}]} if field else None
        return respond(request, exc.http_status, exc.code, str(exc), details)

    @api.exception_handler(Exception)
    def on_unexpected(request, exc):
        logger.exception("api.unexpected_error", extra={"path": request.path})
        return respond(
            request, 500, "internal_error", "an unexpected error occurred; it was logged"
        )
