"""Keyset pagination for list endpoints: a JSON array plus an RFC 8288 ``Link: rel="next"``."""

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def paginate(
    request: HttpRequest, response: HttpResponse, queryset, *, limit: int, before: int | None
) -> list:
    """Return up to ``limit`` rows of ``queryset`` (newest first) with ids below ``before``."""
    if before is not None:
        queryset = queryset.filter(pk__lt=before)
    rows = list(queryset.order_by("-pk")[: limit + 1])
    if len(rows) > limit:
        rows = rows[:limit]
        query = request.GET.copy()
        query["before"] = str(rows[-1].pk)
        query["limit"] = str(limit)
        response["Link"] = f'<{request.path}?{urlencode(query, doseq=True)}>; rel="next"'
    return rows
