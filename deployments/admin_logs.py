"""The deployment page's log views: the page's follower (JSON) and the raw log's download.

Both answer exactly whom the deployment's page answers: a user with the admin's view
permission on that deployment (``has_view_permission``); anyone else gets 403.
"""

from django.core.exceptions import PermissionDenied
from django.http import JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path

from deployments import log_page, selectors
from deployments.models import Deployment, LogChunk

# The page shows this much of the log's end first; "Load earlier" reaches back this much more.
LOG_TAIL_BYTES = 256 * 1024
# One request of the page's log follower reads at most this much.
LOG_PAGE_BYTES = 256 * 1024
# The download reads this many chunks (64 KiB each at most) per query.
DOWNLOAD_BATCH = 16


class LogViewsMixin:
    """Adds ``<id>/log/`` and ``<id>/log/download/`` to the deployment admin."""

    def log_urls(self) -> list:
        view = self.admin_site.admin_view
        return [
            path(
                "<int:deployment_id>/log/", view(self.log_view), name="deployments_deployment_log"
            ),
            path(
                "<int:deployment_id>/log/download/",
                view(self.log_download_view),
                name="deployments_deployment_log_download",
            ),
        ]

    def _viewable(self, request, deployment_id: int) -> Deployment:
        deployment = get_object_or_404(Deployment, pk=deployment_id)
        if not self.has_view_permission(request, deployment):
            raise PermissionDenied
        return deployment

    def log_context(self, deployment: Deployment) -> dict:
        """Return the page's first look at the log: its tail, rendered, and where it began."""
        size = selectors.deployment_log_size(deployment=deployment)
        start = max(0, size - LOG_TAIL_BYTES)
        first = log_page.log_page(
            deployment=deployment,
            offset=start,
            limit_bytes=max(1, size - start),
            from_line_start=True,
        )
        return {
            "log_first_page": first,
            "log_complete": first["complete"],
            "log_chunk": LOG_TAIL_BYTES,
        }

    def log_view(self, request, deployment_id: int):
        """JSON page of the log from ``offset`` (log_page's lines; ``format=text``: plain text).

        Permission: view on the deployment (``has_view_permission``), as its page.
        """
        deployment = self._viewable(request, deployment_id)
        try:
            offset = max(0, int(request.GET.get("offset", 0)))
            limit = min(max(1, int(request.GET.get("limit", LOG_PAGE_BYTES))), LOG_PAGE_BYTES)
        except ValueError:
            return JsonResponse({"error": "offset and limit are byte counts"}, status=400)
        if request.GET.get("format") == "text":
            return JsonResponse(
                selectors.deployment_logs(deployment=deployment, offset=offset, limit_bytes=limit)
            )
        page = log_page.log_page(
            deployment=deployment,
            offset=offset,
            limit_bytes=limit,
            style=request.GET.get("style", "")[:200],
            from_line_start=request.GET.get("from") == "line",
        )
        return JsonResponse(page)

    def log_download_view(self, request, deployment_id: int):
        """The whole stored log as a ``text/plain`` attachment, escape sequences and all.

        Permission: view on the deployment (``has_view_permission``), as its page. What is
        stored is already masked; it is streamed a batch of chunks at a time.
        """
        deployment = self._viewable(request, deployment_id)
        response = StreamingHttpResponse(
            _chunks(deployment.pk), content_type="text/plain; charset=utf-8"
        )
        response["Content-Disposition"] = (
            f'attachment; filename="{deployment.project.slug}-deployment-{deployment.pk}.log"'
        )
        response["X-Content-Type-Options"] = "nosniff"
        return response


def _chunks(deployment_id: int):
    """Yield the stored log's bytes in order, DOWNLOAD_BATCH chunks per query."""
    after = -1
    while True:
        batch = list(
            LogChunk.objects.filter(deployment_id=deployment_id, sequence__gt=after)
            .order_by("sequence")
            .values_list("sequence", "data")[:DOWNLOAD_BATCH]
        )
        for sequence, data in batch:
            after = sequence
            yield bytes(data)
        if len(batch) < DOWNLOAD_BATCH:
            return
