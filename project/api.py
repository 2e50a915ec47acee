"""The REST API under /api/v1/: one NinjaAPI, one router per app, one error shape."""

from ninja import NinjaAPI

from jobs.api import router as jobs_router
from jobs.auth import BearerToken
from project import api_errors

api = NinjaAPI(
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
