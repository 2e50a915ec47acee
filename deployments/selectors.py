"""Read-only views of deployments for the API, the admin and the commands."""

from dataclasses import dataclass
from datetime import datetime

from deployments import log_render
from deployments.conf import LOG_CHUNK_BYTES
from deployments.errors import DeploymentNotFound
from deployments.models import FINISHED, Deployment, LogChunk
from project.timing import seconds_between

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
        "health": health_as_dict(deployment),
        "waiting_for": deployment.waiting_for or None,
        "waiting_since": deployment.waiting_since,
    }


def deployment_duration(deployment: Deployment) -> float | None:
    """Return how long the deployment ran (start to finish), in seconds; None if it has not."""
    return seconds_between(deployment.started_at, deployment.finished_at)


def deployment_log_size(*, deployment: Deployment) -> int:
    """Return how many bytes of log the deployment has stored."""
    last = (
        LogChunk.objects.filter(deployment=deployment)
        .order_by("-sequence")
        .values_list("offset", "size")
        .first()
    )
    return last[0] + last[1] if last else 0


@dataclass(frozen=True)
class LogWindow:
    """Stored log bytes from ``offset`` (``data``), with what a reader needs around them.

    ``times`` lists ``(offset, stored_at)`` of each chunk the bytes come from: the time a
    chunk was written is the only time the log keeps (the runner stores output at least
    every LOG_FLUSH_SECONDS, so a line is at most that much older than its chunk).
    """

    offset: int
    data: bytes
    times: list[tuple[int, datetime]]
    total: int
    finished: bool


def deployment_log_window(*, deployment: Deployment, offset: int, limit_bytes: int) -> LogWindow:
    """Return up to ``limit_bytes`` of stored log from byte ``offset`` (possibly mid-character)."""
    offset = max(0, int(offset))
    limit_bytes = max(1, min(int(limit_bytes), MAX_LOG_LIMIT))
    # Status first: the runner stores the last chunk before the final status, so a final
    # status read here guarantees the chunks read below are all there are.
    status = Deployment.objects.filter(pk=deployment.pk).values_list("status", flat=True).first()
    chunks = LogChunk.objects.filter(
        deployment=deployment,
        offset__gt=offset - LOG_CHUNK_BYTES,
        offset__lt=offset + limit_bytes,
    ).order_by("sequence")
    data = bytearray()
    times: list[tuple[int, datetime]] = []
    start = None
    for chunk_offset, size, payload, stored_at in chunks.values_list(
        "offset", "size", "data", "created_at"
    ):
        if chunk_offset + size <= offset:
            continue
        if start is None:
            start = chunk_offset
        elif chunk_offset != start + len(data):
            break  # a gap cannot happen with one writer; stop rather than glue wrong bytes
        data += bytes(payload)
        times.append((max(chunk_offset, offset), stored_at))
    total = deployment_log_size(deployment=deployment)
    window = b"" if start is None else bytes(data[offset - start : offset - start + limit_bytes])
    return LogWindow(
        offset=min(offset, total) if start is None else offset,
        data=window,
        times=times,
        total=total,
        finished=status in FINISHED,
    )


def deployment_logs(
    deployment: Deployment | int,
    offset: int = 0,
    limit_bytes: int = DEFAULT_LOG_LIMIT,
    *,
    ansi: bool = True,
) -> dict:
    """Return up to ``limit_bytes`` of log from byte ``offset``: ``{text, next_offset, complete}``.

    Offsets count stored (masked) bytes. The slice never splits a UTF-8 character, so
    ``next_offset`` can be passed back as is; invalid bytes a step printed come back as
    U+FFFD. ``complete`` is true once the deployment has finished and everything was read.
    With ``ansi=False`` escape sequences are stripped, and one the slice would cut in two is
    left for the next read (``next_offset`` stops before it), or read whole when the slice
    holds nothing before it (the limit is smaller than the sequence).
    """
    if not isinstance(deployment, Deployment):
        deployment = deployment_get(deployment_id=int(deployment))
    read = deployment_log_window(deployment=deployment, offset=offset, limit_bytes=limit_bytes)
    window, offset, total = read.data, read.offset, read.total
    if not window:
        return {"text": "", "next_offset": offset, "complete": read.finished and offset >= total}
    skip = continuation_prefix(window)
    more_follows = offset + len(window) < total
    end = complete_characters(window, more_follows=more_follows)
    if end <= skip:  # the limit is smaller than one character: return that character whole
        end = len(window)
    if not ansi and (more_follows or not read.finished):
        window, end = _before_unfinished_escape(deployment, read, skip, end)
    text = window[skip:end].decode("utf-8", errors="replace")
    if not ansi:
        text = log_render.strip(text)
    next_offset = offset + end
    return {
        "text": text,
        "next_offset": next_offset,
        "complete": read.finished and next_offset >= total,
    }


def _before_unfinished_escape(
    deployment: Deployment, read: LogWindow, skip: int, end: int
) -> tuple[bytes, int]:
    """Return the bytes and where the text must end so that no escape sequence is cut in two."""
    cut = log_render.unfinished_escape(read.data[:end])
    if cut is None:
        return read.data, end
    if cut > skip:
        return read.data, cut
    longer = deployment_log_window(
        deployment=deployment, offset=read.offset, limit_bytes=end + log_render.HOLD_LIMIT
    )
    whole = log_render.ESCAPE_BYTES.match(longer.data, cut)
    if whole is not None:
        return longer.data, whole.end()
    # Not ended yet: wait for it while the log may still grow; else it is not a sequence.
    return read.data, cut if longer.offset + len(longer.data) >= longer.total else end


def continuation_prefix(window: bytes) -> int:
    """Count UTF-8 continuation bytes at the start (an offset in the middle of a character)."""
    count = 0
    while count < min(3, len(window)) and 0x80 <= window[count] <= 0xBF:
        count += 1
    return count


def complete_characters(window: bytes, *, more_follows: bool) -> int:
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


def health_as_dict(deployment: Deployment) -> dict | None:
    """The deployment JSON's ``health``: None without a gate."""
    health = deployment.health or {}
    if not health:
        return None
    return {
        "status": health.get("status"),
        "until": health.get("until"),
        "evaluated_at": health.get("evaluated_at"),
        "reasons": health.get("reasons", []),
        "figures": health.get("figures"),
        "rollback": health.get("rollback"),
    }
