"""The REST API under /api/v1/: one NinjaAPI, one router per app, one error shape."""

from ninja import NinjaAPI

from deployments.api import router as deployments_router
from deployments.api_environments import router as environments_router
from jobs.api import router as jobs_router
from jobs.workflows.api import router as workflows_router
from project import api_errors
from project.access.auth import BearerToken
from webhooks.api import router as webhooks_router

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object"},
            },
        }
    },
}
ERROR_STATUSES = {
    "400": "Malformed request",
    "401": "No valid bearer token",
    "403": "The token's scope does not allow this",
    "404": "Not found (or not visible to this token)",
    "405": "Method not allowed",
    "409": "Conflicts with the object's state, or the Idempotency-Key is in flight",
    "413": "Request body over 1 MiB",
    "422": "Invalid or unknown field, or an Idempotency-Key reused with another body",
    "429": "Too many failed authentication attempts from this client (see Retry-After)",
}


class ConveyorApi(NinjaAPI):
    """NinjaAPI whose OpenAPI document also describes the one error shape on every operation."""

    def get_openapi_schema(self, *args, **kwargs):
        schema = super().get_openapi_schema(*args, **kwargs)
        schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        error = {
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        }
        for operations in schema["paths"].values():
            for operation in operations.values():
                for status, description in ERROR_STATUSES.items():
                    operation["responses"].setdefault(status, {"description": description, **error})
        return schema


api = ConveyorApi(
    title="Conveyor API",
    version="1",
    description="Deployments and background jobs. Send `Authorization: Bearer <token>`.",
    auth=BearerToken(),
    urls_namespace="api",
    docs_url="/docs",
    openapi_url="/openapi.json",
)
api_errors.install(api)
api.add_router("/", jobs_router)
api.add_router("/", workflows_router)
api.add_router("/", deployments_router)
api.add_router("/", environments_router)
api.add_router("/", webhooks_router)
