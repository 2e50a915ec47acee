"""Read-only views of deployments for the API, the admin and the commands."""

from deployments.conf import LOG_CHUNK_BYTES
from deployments.errors import DeploymentNotFound
from deployments.models import FINISHED, Deployment, LogChunk

DEFAULT_LOG_LIMIT = 1024 * 1024
MAX_LOG_LIMIT = 8 * 1024 * 1024


def deployment_get(*, deployment_id: int) -> Deployment:
    """Return one deployment (with its project), or raise DeploymentNotFound."""
    found = (
        Deployment.objects.select_related("project", "retry_of", "triggered_by_user")
        .filter(pk=deployment_id)
        .first()
    )
    if found is None:
        raise DeploymentNotFound(f"no deployment {deployment_id}")
    return found


def person_of(deployment: Deployment) -> str | None:
    """Return the username of the person behind ``deployment``, or None."""
    if deployment.triggered_by_user_id is None:
        return None
    return deployment.triggered_by_user.get_username()


def deployment_as_dict(deployment: Deployment) -> dict:
    """Return the public JSON fields of a deployment (DESIGN.md's contract, plus extras)."""
    return {
        "id": deployment.pk,
        "project": deployment.project.slug,
        "environment": deployment.environment,
        "ref": deployment.ref,
        "commit_sha": deployment.commit_sha or None,
        "status": deployment.status,
        "failure_reason": deployment.failure_reason or None,
        "retry_of": deployment.retry_of_id,
        "rollback_of": deployment.rollback_of_id,
        "undoes": deployment.undoes_id,
        "attempt": deployment.attempt,
        "created_at": deployment.created_at,
        "started_at": deployment.started_at,
        "finished_at": deployment.finished_at,
        "pipeline": deployment.pipeline_name,
        "params": deployment.params,
        "triggered_by": deployment.triggered_by,
        "triggered_by_user": person_of(deployment),
        "cancel_requested_at": deployment.cancel_requested_at,
        "steps": deployment.steps,
        "duration_seconds": deployment_duration(deployment),
    }


def deployment_duration(deployment: Deployment) -> float | None:
    """Return how long the deployment ran (start to finish), in seconds; None if it has not."""
    if deployment.started_at and deployment.finished_at:
        return round((deployment.finished_at - deployment.started_at).total_seconds(), 3)
    return None


def deployment_log_size(*, deployment: Deployment) -> int:
    """Return how many bytes of log the deployment has stored."""
    last = (
        LogChunk.objects.filter(deployment=deployment)
        .order_by("-sequence")
        .values_list("offset", "size")
        .first()
    )
    return last[0] + last[1] if last else 0


def deployment_logs(
    deployment: Deployment | int, offset: int = 0, limit_bytes: int = DEFAULT_LOG_LIMIT
) -> dict:
    """Return up to ``limit_bytes`` of log from byte ``offset``: ``{text, next_offset, complete}``.

    Offsets count stored (masked) bytes. The slice never splits a UTF-8 character, so
    ``next_offset`` can be passed back as is; invalid bytes a step printed come back as
    U+FFFD. ``complete`` is true once the deployment has finished and everything was read.
    """
    if not isinstance(deployment, Deployment):
        deployment = deployment_get(deployment_id=int(deployment))
    offset = max(0, int(offset))
    limit_bytes = max(1, min(int(limit_bytes), MAX_LOG_LIMIT))
    # Status first: the runner stores the last chunk before the final status, so a final
    # status read here guarantees the chunks read below are all there are.
    status = Deployment.objects.filter(pk=deployment.pk).values_list("status", flat=True).first()
    finished = status in FINISHED
    chunks = LogChunk.objects.filter(
        deployment=deployment,
        offset__gt=offset - LOG_CHUNK_BYTES,
        offset__lt=offset + limit_bytes,
    ).order_by("sequence")
    data = bytearray()
    start = None
    for chunk in chunks.values_list("offset", "size", "data"):
        chunk_offset, size, payload = chunk
        if chunk_offset + size <= offset:
            continue
        if start is None:
            start = chunk_offset
        elif chunk_offset != start + len(data):
            break  # a gap cannot happen with one writer; stop rather than glue wrong bytes
        data += bytes(payload)
    total = deployment_log_size(deployment=deployment)
    if start is None:
        next_offset = min(offset, total)
        return {
            "text": "",
            "next_offset": next_offset,
            "complete": finished and next_offset >= total,
        }
    window = bytes(data[offset - start : offset - start + limit_bytes])
    skip = _continuation_prefix(window)
    end = _complete_characters(window, more_follows=offset + len(window) < total)
    if end <= skip:  # the limit is smaller than one character: return that character whole
        end = len(window)
    text = window[skip:end].decode("utf-8", errors="replace")
    next_offset = offset + end
    return {"text": text, "next_offset": next_offset, "complete": finished and next_offset >= total}


def _continuation_prefix(window: bytes) -> int:
    """Count UTF-8 continuation bytes at the start (an offset in the middle of a character)."""
    count = 0
    while count < min(3, len(window)) and 0x80 <= window[count] <= 0xBF:
        count += 1
    return count


def _complete_characters(window: bytes, *, more_follows: bool) -> int:
    """Return the length of ``window`` without a trailing partial UTF-8 character."""
    if not more_follows:
        return len(window)
    for back in range(1, min(4, len(window)) + 1):
        byte = window[-back]
        if byte < 0x80:
            return len(window)
        if byte >= 0xC0:  # a lead byte: is its character complete?
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(window) if back >= needed else len(window) - back
    return len(window)
