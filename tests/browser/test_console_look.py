"""How the console looks in a real browser: links that can be read, in both themes and widths.

Screenshots go to ``var/test/screenshots/`` (CONVEYOR_VAR_DIR/screenshots) for a person to
look at: the admin index and the webhook endpoint form at 1440 and 1024 px, light and dark.
"""

import pytest
from django.db.models import Q
from django.utils import timezone
from playwright.sync_api import expect

from jobs.services import job_bury, job_claim
from tests.browser.test_console import shot
from webhooks import services as webhooks
from webhooks.dispatch import notify
from webhooks.models import DeliveryAttempt
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
    # Django's sidebar fades in (a visibility transition): its text shows once it has.
    expect(current).to_have_text("Dashboard")
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


def test_no_page_asks_for_something_missing(admin_page):
    """No 404 anywhere, the favicon included, on the console's main pages and the API docs."""
    page = admin_page
    failed, icons = [], []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    page.on("response", lambda r: icons.append((r.url, r.status)) if "favicon" in r.url else None)
    for url in ("/admin/", "/admin/dashboard/", "/admin/jobs/job/", "/api/v1/docs"):
        page.goto(url)
        page.wait_for_load_state("networkidle")
    assert failed == []
    assert page.request.get("/favicon.ico").status == 200  # the redirect, followed
    assert all(status in (200, 304) for _, status in icons), icons


def test_a_replayed_delivery_page(admin_page, settings):
    """A dead delivery replayed: its attempts numbered on, the replay marked, JSON indented."""
    settings.CONVEYOR_WEBHOOKS_ALLOW_PRIVATE = True
    webhooks.endpoint_create(url="http://127.0.0.1:9/hook", topics=["job.dead"], actor="test")
    (delivery,) = notify("job.dead", {"job_id": 1}).deliveries.all()
    first = job_claim(delivery.job_id, worker="test/1")
    attempt(delivery, first.pk, 1, "retry", 503, "<h1>Service Unavailable</h1>")
    job_bury(Q(pk=first.pk), error="DeliveryFailed: HTTP 503")
    delivery = webhooks.delivery_replay(delivery_id=delivery.pk, actor="test")
    second = job_claim(delivery.job_id, worker="test/1")
    attempt(delivery, second.pk, 1, "delivered", 200, '{"received":true,"id":"evt_1","n":[1,2]}')
    page = admin_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"/admin/webhooks/delivery/{delivery.pk}/change/")
    rows = page.locator("#delivery-attempts tbody tr")
    assert rows.nth(0).locator("td").nth(2).inner_text() == "dead"
    assert rows.nth(1).locator("td").nth(0).inner_text() == "2 replay"
    body = rows.nth(1).locator("pre.response-body").inner_text()
    assert body.startswith('{\n  "received": true,\n')
    assert rows.nth(0).locator("pre.response-body").inner_text() == "<h1>Service Unavailable</h1>"
    assert page.locator("#delivery-attempts h1").count() == 0  # shown, not rendered
    shot(page, "delivery-replayed-1440")


def attempt(delivery, job_id: int, number: int, outcome: str, status: int, body: str) -> None:
    DeliveryAttempt.objects.create(
        delivery=delivery,
        job_id=job_id,
        number=number,
        started_at=timezone.now(),
        status_code=status,
        latency_ms=40,
        response_body=body,
        outcome=outcome,
    )
