"""The deployment page's log: lines of styled spans, each with its step, offset and time.

A page of the log is ``{lines, start, next_offset, complete, style, steps}``:

* ``lines``: complete lines only (so a step's sections and a group marker are never cut in
  two), each ``{"o": byte offset, "t": time, "s": step run id or null, "c": [[classes,
  text], …]}``; a line starting ``--- `` (a collapsed group) or ``+++ `` (an expanded one),
  as Buildkite reads them, has ``"g": "closed"|"open"`` and its title, without the marker,
  as its spans. A line longer than a whole page comes in pieces: all but the last have
  ``"n": false`` (no newline yet).
* ``t`` is when the chunk holding the line's first byte was stored, not when the line was
  printed: the runner stores output at least every LOG_FLUSH_SECONDS, so the lines of one
  chunk share its time. That is all the precision the log has.
* ``style``: the colour state at the end, which the next request passes back (``style=``),
  since a colour set on one line stays on until reset, as in a terminal (but not past the
  end of its step).
* ``steps``: every step run with its name, status, start, duration, exit code and log range.
"""

import bisect

from deployments import log_render, selectors
from deployments.models import Deployment, StepRun
from deployments.selectors import complete_characters, continuation_prefix
from project.timing import seconds_between

GROUP_MARKERS = {"--- ": "closed", "+++ ": "open"}


def step_sections(*, deployment: Deployment) -> list[dict]:
    """Return each step run of ``deployment`` as the page's section header needs it."""
    sections = []
    for run in StepRun.objects.filter(deployment=deployment).order_by("position"):
        duration = seconds_between(run.started_at, run.finished_at, digits=1)
        sections.append(
            {
                "id": run.pk,
                "position": run.position,
                "name": run.name,
                "status": run.status,
                "exit_code": run.exit_code,
                "started_at": run.started_at.isoformat() if run.started_at else None,
                "duration": duration,
                "log_start": run.log_start,
                "log_end": run.log_end,
            }
        )
    return sections


def log_page(
    *,
    deployment: Deployment,
    offset: int,
    limit_bytes: int,
    style: str = "",
    from_line_start: bool = False,
) -> dict:
    """Return the page of log from ``offset`` (see the module doc).

    ``from_line_start`` (reading from a point picked by size, e.g. the log's tail) skips to
    the first whole line.
    """
    read = selectors.deployment_log_window(
        deployment=deployment, offset=offset, limit_bytes=limit_bytes
    )
    data, base = read.data, read.offset
    skip = continuation_prefix(data)
    if from_line_start and base > 0:
        newline = data.find(b"\n")
        skip = newline + 1 if newline >= 0 else skip
    ended = read.finished and base + len(data) >= read.total
    if ended:
        end = len(data)  # the log has ended: its last line needs no newline
    elif (newline := data.rfind(b"\n")) >= skip:
        end = newline + 1
    elif len(data) >= limit_bytes:  # one line longer than the page: send what there is
        end = complete_characters(data, more_follows=True)
    else:
        end = skip
    sections = step_sections(deployment=deployment)
    lines, state = _lines(data, base, (skip, end, ended), read.times, sections, style)
    next_offset = base + end if end > skip else base
    return {
        "lines": lines,
        "start": base + skip if end > skip else base,
        "next_offset": next_offset,
        "complete": read.finished and next_offset >= read.total,
        "style": state.classes,
        "steps": sections,
    }


def _lines(data: bytes, base: int, bounds: tuple, times: list, sections: list, style: str):
    skip, end, ended = bounds
    state = log_render.Style.from_classes(style)
    time_offsets = [at for at, _ in times]
    # Each step is a process of its own: a colour one left on ends with it.
    boundaries = {s[key] for s in sections for key in ("log_start", "log_end")} - {None}
    lines = []
    position = skip
    while position < end:
        newline = data.find(b"\n", position, end)
        stop = end if newline == -1 else newline
        if base + position in boundaries:
            state = log_render.Style()
        spans, state = log_render.render_line(
            data[position:stop].decode("utf-8", errors="replace"), state
        )
        offset = base + position
        found = bisect.bisect_right(time_offsets, offset) - 1
        line = {
            "o": offset,
            "t": times[found][1].isoformat() if found >= 0 else None,
            "s": _step_at(sections, offset),
            "c": spans,
        }
        plain = "".join(text for _, text in spans)
        for marker, kind in GROUP_MARKERS.items():
            if plain.startswith(marker):
                line["g"] = kind
                line["c"] = log_render.drop_prefix(spans, len(marker))
        if newline == -1 and not ended:
            line["n"] = False
        lines.append(line)
        position = stop + 1
    return lines, state


def _step_at(sections: list[dict], offset: int) -> int | None:
    for section in sections:
        start, stop = section["log_start"], section["log_end"]
        if start is not None and start <= offset and (stop is None or offset < stop):
            return section["id"]
    return None
