"""Server-rendered bar charts for the dashboard: no JavaScript library, no CDN.

A chart fills its container's width at any page width. The bars are an SVG drawn in
``WIDTH`` x ``PLOT_HEIGHT`` units and stretched to the plot's box
(``preserveAspectRatio="none"``: a bar may widen, nothing in it is text); the y-axis figures
are HTML beside it and the time labels an unscaled SVG under it, placed in percent, so type
keeps its size. Each time label is centred under its bar, except that one too close to an
edge is aligned to it (``text-anchor``), so the last is never cut off. No inline style: the
console's CSP allows stylesheets only (console.css lays the parts out).
"""

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, PLOT_HEIGHT = 1000, 150
OK_COLOR, FAIL_COLOR = "#2e7d32", "#ba2121"
# A label centred closer than this to an edge (percent of the width) is aligned to that edge.
EDGE = 3.0


def stacked_bars(points: list[dict], *, label_every: int = 10, fmt: str = "%H:%M") -> SafeString:
    """Draw ``points`` (``at``, ``succeeded``, ``failed``) as stacked bars with a y axis."""
    if not points:
        return SafeString("")
    top = max(max(p["succeeded"] + p["failed"] for p in points), 1)
    slot = WIDTH / len(points)
    bar = max(slot * 0.85, 0.5)
    rects = []
    for i, p in enumerate(points):
        x = i * slot
        ok_h = PLOT_HEIGHT * p["succeeded"] / top
        fail_h = PLOT_HEIGHT * p["failed"] / top
        title = f"{p['at'].strftime(fmt)}: {p['succeeded']} succeeded, {p['failed']} failed"
        rects.append((x, PLOT_HEIGHT - ok_h, bar, ok_h, OK_COLOR, title))
        rects.append((x, PLOT_HEIGHT - ok_h - fail_h, bar, fail_h, FAIL_COLOR, title))
    bars = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        (
            (f"{x:.2f}", f"{y:.2f}", f"{w:.2f}", f"{h:.2f}", c, t)
            for x, y, w, h, c, t in rects
            if h > 0
        ),
    )
    labels = format_html_join(
        "",
        '<text x="{}" y="12" text-anchor="{}">{}</text>',
        (
            (*_label_place(100 * (i + 0.5) / len(points)), p["at"].strftime(fmt))
            for i, p in enumerate(points)
            if i % label_every == 0
        ),
    )
    aria = (
        f"{sum(p['succeeded'] for p in points)} succeeded, "
        f"{sum(p['failed'] for p in points)} failed"
    )
    return format_html(
        '<div class="console-chart" role="img" aria-label="{aria}">'
        '<div class="console-chart-axis"><span>{top}</span><span>0</span></div>'
        '<svg class="console-chart-plot" viewBox="0 0 {w} {h}" preserveAspectRatio="none" '
        'aria-hidden="true">{bars}</svg>'
        '<svg class="console-chart-labels" aria-hidden="true">{labels}</svg></div>',
        aria=aria,
        top=top,
        w=WIDTH,
        h=PLOT_HEIGHT,
        bars=bars,
        labels=labels,
    )


def _label_place(centre: float) -> tuple[str, str]:
    """Return a label's x and anchor: centred at ``centre`` percent, or at a near edge."""
    if centre > 100 - EDGE:
        return ("100%", "end")
    if centre < EDGE:
        return ("0", "start")
    return (f"{centre:.2f}%", "middle")
