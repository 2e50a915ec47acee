"""Give every error under /api/ the API's one JSON error shape; refuse NUL in console requests."""

import json

from django.http import HttpResponseBadRequest, JsonResponse

from project.api_errors import _HTTP_CODES, error_body

API_PREFIX = "/api/"


class ApiErrorShapeMiddleware:
    """Rewrite non-JSON 4xx/5xx answers under /api/ (unknown path, wrong method, CSRF, 500)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not request.path.startswith(API_PREFIX) or response.status_code < 400:
            return response
        if response.get("Content-Type", "").startswith("application/json") and _has_error_shape(
            response
        ):
            return response
        status = response.status_code
        message = {
            404: "no such API path",
            405: f"method {request.method} is not allowed here",
        }.get(status, response.reason_phrase or "error")
        shaped = JsonResponse(error_body(_HTTP_CODES.get(status, "error"), message), status=status)
        if response.has_header("Allow"):
            shaped["Allow"] = response["Allow"]
        return shaped


def _has_error_shape(response) -> bool:
    try:
        return "error" in json.loads(response.content)
    except (ValueError, TypeError):
        return False


class RefuseNulBytesMiddleware:
    """Answer 400 to a console request whose path or query string holds a NUL character.

    PostgreSQL cannot store or compare text holding NUL, so a filter, search or autocomplete
    term such as ``?status__exact=%00`` fails inside the query (a 500) on any admin page,
    Conveyor's or a third party's. The API answers such values itself (422, in its shape).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith(API_PREFIX) and _holds_nul(request):
            return HttpResponseBadRequest("A NUL character is not allowed in a request.")
        return self.get_response(request)


def _holds_nul(request) -> bool:
    if "\x00" in request.path:
        return True
    return any(
        "\x00" in key or any("\x00" in value for value in values)
        for key, values in request.GET.lists()
    )
