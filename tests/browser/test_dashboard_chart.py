"""The dashboard's throughput chart in Chromium: as wide as the page's content, every time
label inside the chart and of a readable size, at 1440 and 1024 px. Screenshots:
``dashboard-chart-<width>.png`` in ``var/test/screenshots/``.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.accounting import rollup
from jobs.models import Job, JobStatus
from jobs.services import enqueue_many
from tests.browser.test_console import shot

# The chart's box and its parent's content box, and each label's box with its text.
GEOMETRY_JS = """() => {
  const chart = document.querySelector('#dashboard-chart .console-chart');
  const parent = chart.parentElement, style = getComputedStyle(parent);
  const inner = parent.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const box = chart.getBoundingClientRect();
  const labels = [...chart.querySelectorAll('.console-chart-labels text')].map((t) => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right};
  });
  return {left: box.left, right: box.right, width: box.width, parent: inner, labels};
}"""


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_chart_uses_the_width_and_its_last_label_is_whole(admin_page, width):
    jobs = enqueue_many("tests.record", [{}] * 6)
    now = timezone.now()
    for i, job in enumerate(jobs):
        ended = now - timedelta(minutes=i * 7)
        Job.objects.filter(pk=job.pk).update(
            status=JobStatus.DEAD if i % 3 == 0 else JobStatus.SUCCEEDED,
            started_at=ended - timedelta(seconds=2),
            finished_at=ended,
        )
    rollup.refresh(now=now)
    # refresh() recomputes a few minutes: the older ends need their own minutes refreshed.
    for i in range(len(jobs)):
        rollup.refresh(now=now - timedelta(minutes=i * 7))
    page = admin_page
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto("/admin/dashboard/")
    page.wait_for_selector("#dashboard-chart .console-chart")
    found = page.evaluate(GEOMETRY_JS)
    assert found["width"] >= found["parent"] - 2, found  # the content's whole width
    assert found["labels"], found
    for label in found["labels"]:
        assert found["left"] - 0.5 <= label["left"], (label, found["left"])
        assert label["right"] <= found["right"] + 0.5, (label, found["right"])
    chart = page.locator("#dashboard-chart .console-chart")
    assert chart.get_attribute("aria-label") == "4 succeeded, 2 failed"
    # The labels keep their type size whatever the width (the bars stretch, text does not).
    size = page.evaluate(
        "() => getComputedStyle(document.querySelector('.console-chart-labels text')).fontSize"
    )
    assert size == "10px"
    plot = page.locator(".console-chart-plot").bounding_box()
    assert plot["width"] >= found["width"] * 0.9
    shot(page, f"dashboard-chart-{width}")
