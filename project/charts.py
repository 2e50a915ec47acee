"""Server-rendered SVG bar charts for the dashboard: no JavaScript library, no CDN."""

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT = 720, 160
PAD_LEFT, PAD_BOTTOM, PAD_TOP = 36, 18, 8
OK_COLOR, FAIL_COLOR = "#2e7d32", "#ba2121"


def stacked_bars(points: list[dict], *, label_every: int = 10, fmt: str = "%H:%M") -> SafeString:
    """Draw ``points`` (``at``, ``succeeded``, ``failed``) as stacked bars with a y axis."""
    if not points:
        return SafeString("")
    top = max(max(p["succeeded"] + p["failed"] for p in points), 1)
    plot_w, plot_h = WIDTH - PAD_LEFT, HEIGHT - PAD_BOTTOM - PAD_TOP
    slot = plot_w / len(points)
    bar = max(slot - 1, 1)
    rects = []
    for i, p in enumerate(points):
        x = PAD_LEFT + i * slot
        ok_h = plot_h * p["succeeded"] / top
        fail_h = plot_h * p["failed"] / top
        when = p["at"].strftime(fmt)
        title = f"{when}: {p['succeeded']} succeeded, {p['failed']} failed"
        base = PAD_TOP + plot_h
        rects.append((x, base - ok_h, bar, ok_h, OK_COLOR, title))
        rects.append((x, base - ok_h - fail_h, bar, fail_h, FAIL_COLOR, title))
    bars = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        (
            (f"{x:.1f}", f"{y:.1f}", f"{w:.1f}", f"{h:.1f}", c, t)
            for x, y, w, h, c, t in rects
            if h > 0
        ),
    )
    labels = format_html_join(
        "",
        '<text x="{}" y="{}" font-size="10" fill="#666">{}</text>',
        (
            (f"{PAD_LEFT + i * slot:.1f}", HEIGHT - 4, p["at"].strftime(fmt))
            for i, p in enumerate(points)
            if i % label_every == 0
        ),
    )
    return format_html(
        '<svg class="console-chart" viewBox="0 0 {w} {h}" width="100%" role="img" '
        'aria-label="{aria}">'
        '<line x1="{pl}" y1="{pt}" x2="{pl}" y2="{base}" stroke="#999"/>'
        '<line x1="{pl}" y1="{base}" x2="{w}" y2="{base}" stroke="#999"/>'
        '<text x="2" y="{ytop}" font-size="10" fill="#666">{top}</text>'
        '<text x="2" y="{base}" font-size="10" fill="#666">0</text>{bars}{labels}</svg>',
        w=WIDTH,
        h=HEIGHT,
        pl=PAD_LEFT,
        pt=PAD_TOP,
        base=PAD_TOP + plot_h,
        ytop=PAD_TOP + 8,
        top=top,
        bars=bars,
        labels=labels,
        aria=f"{sum(p['succeeded'] for p in points)} succeeded, "
        f"{sum(p['failed'] for p in points)} failed",
    )


P50_COLOR, P95_COLOR = "#417690", "#e65100"


def _axis_text(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.0f}m"


def lines(
    points: list[dict],
    series: list[tuple[str, str, str]],
    *,
    label_every: int = 10,
    fmt: str = "%H:%M",
) -> SafeString:
    """Draw ``points`` (``at`` plus a number of seconds or None per key) as lines with dots.

    ``series`` is ``(key, label, colour)``; a bucket whose value is None (no job ended in it)
    breaks the line.
    """
    values = [p[key] for p in points for key, _, _ in series if p[key] is not None]
    if not points:
        return SafeString("")
    top = max(values, default=0) or 1.0
    plot_w, plot_h = WIDTH - PAD_LEFT, HEIGHT - PAD_BOTTOM - PAD_TOP
    slot = plot_w / len(points)
    base = PAD_TOP + plot_h
    drawn = []
    for key, label, color in series:
        runs, run, dots = [], [], []
        for i, p in enumerate(points):
            value = p[key]
            if value is None:
                if run:
                    runs.append(run)
                run = []
                continue
            x, y = PAD_LEFT + (i + 0.5) * slot, base - plot_h * value / top
            run.append(f"{x:.1f},{y:.1f}")
            title = f"{p['at'].strftime(fmt)}: {label} {_axis_text(value)}"
            dots.append((f"{x:.1f}", f"{y:.1f}", color, title))
        if run:
            runs.append(run)
        drawn.append(
            format_html_join(
                "",
                '<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"/>',
                ((" ".join(r), color) for r in runs if len(r) > 1),
            )
        )
        drawn.append(
            format_html_join(
                "",
                '<circle cx="{}" cy="{}" r="3" fill="{}"><title>{}</title></circle>',
                dots,
            )
        )
    labels = format_html_join(
        "",
        '<text x="{}" y="{}" font-size="10" fill="#666">{}</text>',
        (
            (f"{PAD_LEFT + i * slot:.1f}", HEIGHT - 4, p["at"].strftime(fmt))
            for i, p in enumerate(points)
            if i % label_every == 0
        ),
    )
    return format_html(
        '<svg class="console-chart" viewBox="0 0 {w} {h}" width="100%" role="img" '
        'aria-label="{aria}">'
        '<line x1="{pl}" y1="{pt}" x2="{pl}" y2="{base}" stroke="#999"/>'
        '<line x1="{pl}" y1="{base}" x2="{w}" y2="{base}" stroke="#999"/>'
        '<text x="{ylab}" y="{ytop}" font-size="10" fill="#666" text-anchor="end">{top}</text>'
        '<text x="{ylab}" y="{base}" font-size="10" fill="#666" text-anchor="end">0</text>'
        "{lines}{labels}</svg>",
        w=WIDTH,
        h=HEIGHT,
        pl=PAD_LEFT,
        pt=PAD_TOP,
        base=base,
        ytop=PAD_TOP + 8,
        top=_axis_text(top),
        ylab=PAD_LEFT - 3,
        lines=SafeString("".join(drawn)),
        labels=labels,
        aria=", ".join(label for _, label, _ in series) + " over time",
    )
