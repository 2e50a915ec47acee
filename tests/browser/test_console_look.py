"""How the console looks in a real browser: links that can be read, in both themes and widths.

Screenshots go to ``var/test/screenshots/`` (CONVEYOR_VAR_DIR/screenshots) for a person to
look at: the admin index and the webhook endpoint form at 1440 and 1024 px, light and dark.
"""

import pytest

from tests.browser.test_console import shot
from webhooks import services as webhooks
from webhooks.topics import TOPICS

WIDTHS = (1440, 1024)
# WCAG's contrast ratio for large or bold text; the bug this guards had a ratio of 1.0.
MIN_CONTRAST = 3.0

# The link's colour and the colour it is drawn on (the first ancestor with a background).
COLOURS_JS = """(el) => {
  const parse = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  let bg = el, colour = parse(getComputedStyle(el).color);
  while (bg) {
    const b = parse(getComputedStyle(bg).backgroundColor);
    if (b.length === 3 || (b.length === 4 && b[3] > 0)) return [colour, b];
    bg = bg.parentElement;
  }
  return [colour, [255, 255, 255]];
}"""


# Labels in which a word is split over two lines: each word's pieces must share one line.
WORDS_BROKEN_JS = """(labels) => labels.flatMap((label) => {
  const broken = [];
  const walker = document.createTreeWalker(label, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const re = /\\S+/g;
    for (let m = re.exec(node.data); m; m = re.exec(node.data)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (tops.size > 1) broken.push(m[0]);
    }
  }
  return broken;
})"""


def contrast(a: list[float], b: list[float]) -> float:
    def luminance(rgb):
        channels = [c / 255 for c in rgb[:3]]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_dashboard_link_on_the_index_can_be_read(admin_page, scheme):
    page = admin_page
    page.emulate_media(color_scheme=scheme)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto("/admin/")
        links = page.locator(".app-console a[href='/admin/dashboard/']")
        assert links.count() >= 2  # the section's caption and the Dashboard row
        for i in range(links.count()):
            link = links.nth(i)
            assert link.is_visible()
            colour, background = link.evaluate(COLOURS_JS)
            ratio = contrast(colour, background)
            assert ratio >= MIN_CONTRAST, (scheme, width, link.inner_text(), colour, background)
        shot(page, f"admin-index-{width}-{scheme}")
    page.locator(".app-console th a", has_text="Dashboard").click()
    page.wait_for_selector("#dashboard-queues")
    # The sidebar on the dashboard lists it too, marked as the current page.
    current = page.locator("#nav-sidebar a[aria-current=page]")
    assert current.inner_text() == "Dashboard"
    colour, background = current.evaluate(COLOURS_JS)
    assert contrast(colour, background) >= MIN_CONTRAST
    shot(page, f"dashboard-sidebar-{scheme}")


def test_the_endpoint_form_keeps_each_topic_on_whole_words(admin_page, settings):
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True
    endpoint = webhooks.endpoint_create(
        url="http://127.0.0.1:9/hook", topics=["job.dead"], description="ops", actor="test"
    )
    page = admin_page
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for url, name in (
                (f"/admin/webhooks/endpoint/{endpoint.pk}/change/", "endpoint-form"),
                ("/admin/webhooks/endpoint/add/", "endpoint-add"),
            ):
                page.goto(url)
                labels = page.locator("#id_topics label")
                assert labels.count() == len(TOPICS)
                shot(page, f"{name}-{width}-{scheme}")
                broken = labels.evaluate_all(WORDS_BROKEN_JS)
                assert broken == [], (scheme, width, broken)
