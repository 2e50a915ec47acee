"""A workflow's graph as server-rendered SVG: layers by depth, one box per job, its edges.

No script, no external asset and no inline style (colours are SVG presentation attributes),
so the page keeps to the console's Content-Security-Policy. Every text is escaped. A workflow
with more jobs than ``MAX_DRAWN`` is drawn one box per layer (its jobs counted by status).
"""

from collections import Counter, defaultdict

from django.urls import reverse
from django.utils.html import escape

from jobs.models import Job

MAX_DRAWN = 200
WIDTH, HEIGHT, GAP_X, GAP_Y = 170, 46, 30, 50
COLOURS = {
    "waiting": "#e5e7eb",
    "queued": "#dbeafe",
    "retrying": "#fef3c7",
    "running": "#bfdbfe",
    "succeeded": "#bbf7d0",
    "dead": "#fecaca",
    "cancelled": "#f3f4f6",
}


def layers_of(jobs: list[Job], edges: list[tuple[int, int, bool]]) -> dict[int, int]:
    """Return ``{job id: depth}``: 0 for jobs without dependencies, else 1 + the deepest."""
    deps: dict[int, list[int]] = defaultdict(list)
    for dependant, dependency, _ in edges:
        deps[dependant].append(dependency)
    depth: dict[int, int] = {}
    for job in sorted(jobs, key=lambda job: job.pk):  # enqueued dependencies first
        depth[job.pk] = 1 + max((depth.get(d, 0) for d in deps[job.pk]), default=-1)
    return depth


def svg(jobs: list[Job], edges: list[tuple[int, int, bool]]) -> str:
    """The graph as one ``<svg>`` element (markup already escaped)."""
    if not jobs:  # every job of it was purged (or deleted)
        return _open(2 * GAP_X + WIDTH, HEIGHT) + "</svg>"
    depth = layers_of(jobs, edges)
    by_layer: dict[int, list[Job]] = defaultdict(list)
    for job in jobs:
        by_layer[depth[job.pk]].append(job)
    if len(jobs) > MAX_DRAWN:
        return _summary(by_layer)
    place: dict[int, tuple[int, int]] = {}
    for layer, members in by_layer.items():
        for index, job in enumerate(members):
            place[job.pk] = (GAP_X + index * (WIDTH + GAP_X), GAP_Y + layer * (HEIGHT + GAP_Y))
    width = max(x for x, _ in place.values()) + WIDTH + GAP_X
    height = max(y for _, y in place.values()) + HEIGHT + GAP_Y
    parts = [_open(width, height)]
    for dependant, dependency, done in edges:
        if dependant not in place or dependency not in place:
            continue
        x1, y1 = place[dependency]
        x2, y2 = place[dependant]
        parts.append(
            f'<line x1="{x1 + WIDTH // 2}" y1="{y1 + HEIGHT}" x2="{x2 + WIDTH // 2}" y2="{y2}" '
            f'stroke="{"#16a34a" if done else "#9ca3af"}" stroke-width="1.5" '
            'marker-end="url(#arrow)"/>'
        )
    for job in jobs:
        x, y = place[job.pk]
        parts.append(_box(job, x, y))
    parts.append("</svg>")
    return "".join(parts)


def _open(width: int, height: int) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="workflow-graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="the workflow\'s jobs and what each waits for">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#6b7280"/></marker></defs>'
    )


def _box(job: Job, x: int, y: int) -> str:
    url = reverse("admin:jobs_job_change", args=[job.pk])
    task = job.task if len(job.task) <= 24 else f"…{job.task[-23:]}"
    return (
        f'<a href="{escape(url)}" data-job="{job.pk}" data-status="{escape(job.status)}">'
        f"<title>job {job.pk} {escape(job.task)}: {escape(job.status)}, attempt "
        f"{job.attempts}/{job.max_attempts}</title>"
        f'<rect x="{x}" y="{y}" width="{WIDTH}" height="{HEIGHT}" rx="6" '
        f'fill="{COLOURS.get(job.status, "#ffffff")}" stroke="#374151"/>'
        f'<text x="{x + 8}" y="{y + 18}" font-size="12" fill="#111827">{escape(task)}</text>'
        f'<text x="{x + 8}" y="{y + 36}" font-size="11" fill="#374151">#{job.pk} · '
        f"{escape(job.status)}</text></a>"
    )


def _summary(by_layer: dict[int, list[Job]]) -> str:
    """One box per layer, for a workflow too large to draw job by job."""
    width = 2 * GAP_X + 3 * WIDTH
    height = GAP_Y + len(by_layer) * (HEIGHT + GAP_Y)
    parts = [_open(width, height)]
    for layer in sorted(by_layer):
        y = GAP_Y + layer * (HEIGHT + GAP_Y)
        counts = Counter(job.status for job in by_layer[layer])
        text = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        if layer:
            parts.append(
                f'<line x1="{width // 2}" y1="{y - GAP_Y}" x2="{width // 2}" y2="{y}" '
                'stroke="#9ca3af" stroke-width="1.5" marker-end="url(#arrow)"/>'
            )
        parts.append(
            f'<g data-layer="{layer}"><rect x="{GAP_X}" y="{y}" width="{3 * WIDTH}" '
            f'height="{HEIGHT}" rx="6" fill="#f9fafb" stroke="#374151"/>'
            f'<text x="{GAP_X + 8}" y="{y + 18}" font-size="12" fill="#111827">layer {layer}: '
            f"{len(by_layer[layer])} jobs</text>"
            f'<text x="{GAP_X + 8}" y="{y + 36}" font-size="11" fill="#374151">'
            f"{escape(text)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)
