"""A deployment's log on its page, run for real by a deployer worker.

The step prints colours, ``--- `` / ``+++ `` group markers and a hostile line; the page must
show one section per step (the failed one open), groups inside, colours from console.css,
the hostile line as text, a search that finds and jumps, times on demand and a download of
the raw log. Screenshots at 1440 and 1024 px go to ``var/test/screenshots/``.
"""

from pathlib import Path

from django.db.models import Q

from deployments.models import StepRun
from deployments.runner.logwriter import LogWriter
from deployments.runner.masking import SecretMasker
from deployments.services import deployment_create
from deployments.transitions import transition
from tests.browser.test_console import shot
from tests.browser.waiting import wait_for_js
from tests.conftest import WORKER_ENV as DEPLOY_ENV
from tests.deployments.conftest import wait_for

HOSTILE = '<script>window.__xss=1</script> "><img src=x onerror="window.__xss=2">'
BUILD = "\n".join(
    [
        r"printf '\033[1;31mred bold\033[0m plain \033[32mgreen\033[0m\n'",
        "echo '--- Compiling'",
        "echo 'cc needle.c'",
        "echo '+++ Running tests'",
        r"printf '\033[33m3 passed\033[0m (needle)\n'",
        f"echo '{HOSTILE}'",
        r"printf '\033]0;a title\007\033[2Kafter the title\n'",
    ]
)
DEPLOY = "echo 'deploying the needle'; exit 3"


def test_a_finished_deployments_log_has_sections_colours_search_and_download(
    admin_page, make_project, start_worker
):
    project = make_project(
        "logs",
        pipelines={
            "default": [{"name": "build", "command": BUILD}, {"name": "deploy", "command": DEPLOY}]
        },
    )
    start_worker(queues="deployments", concurrency=1, env=DEPLOY_ENV)
    deployment = wait_for(deployment_create(project=project, ref="main"), "failed")
    page = admin_page
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    page.wait_for_selector("#deployment-log details.log-step")
    wait_for_js(
        page, "document.querySelector('#deployment-log .log-status').textContent === 'complete'"
    )

    # One section per step: the one that succeeded closed, the failed one open.
    steps = page.locator("#deployment-log details.log-step")
    assert steps.count() == 2
    build, deploy = steps.nth(0), steps.nth(1)
    assert build.evaluate("d => d.open") is False and deploy.evaluate("d => d.open") is True
    build_head = build.locator("summary").first.inner_text()
    deploy_head = deploy.locator("summary").first.inner_text()
    assert "1. build" in build_head and "success" in build_head and "exit 0" in build_head
    assert "2. deploy" in deploy_head and "failed" in deploy_head and "exit 3" in deploy_head
    assert "started " in deploy_head and " s" in deploy_head

    # The step's groups: "--- " closed, "+++ " open, the marker itself not shown.
    groups = build.locator("details.log-group")
    assert groups.count() == 2
    assert groups.nth(0).locator("summary").text_content() == "Compiling"
    assert groups.nth(0).evaluate("d => d.open") is False
    assert groups.nth(1).evaluate("d => d.open") is True
    assert "cc needle.c" in groups.nth(0).text_content()

    # Colours and bold come from console.css through the classes, not from style attributes.
    red = build.locator("span.ansi-fg1").first
    assert red.text_content() == "red bold"
    assert red.evaluate("e => getComputedStyle(e).color") == "rgb(224, 82, 82)"
    assert red.evaluate("e => getComputedStyle(e).fontWeight") == "700"
    assert (
        build.locator("span.ansi-fg2").first.evaluate("e => getComputedStyle(e).color")
        == "rgb(95, 195, 95)"
    )
    log_text = page.locator("#deployment-log pre").text_content()
    assert "\x1b" not in log_text and "a title" not in log_text and "after the title" in log_text

    # The hostile line is text: no element made from it, no script run.
    assert HOSTILE in log_text
    assert page.locator("#deployment-log pre img, #deployment-log pre script").count() == 0
    assert page.evaluate("window.__xss === undefined")

    # Search: every match highlighted; Enter jumps on and opens the section it is in.
    page.fill(".log-search-input", "NEEDLE")
    wait_for_js(page, "document.querySelectorAll('mark.log-match').length === 3")
    assert page.locator(".log-search-count").inner_text() == "1 of 3"
    assert page.locator("mark.log-match.current").text_content() == "needle"
    assert build.evaluate("d => d.open") is True  # the first match is in the closed step
    page.press(".log-search-input", "Enter")
    page.press(".log-search-input", "Enter")
    assert page.locator(".log-search-count").inner_text() == "3 of 3"
    current = page.locator("mark.log-match.current")
    assert current.evaluate("m => m.closest('details.log-step').dataset.step") == str(
        deployment.step_runs.get(position=2).pk
    )
    page.press(".log-search-input", "Shift+Enter")
    assert page.locator(".log-search-count").inner_text() == "2 of 3"
    page.fill(".log-search-input", "no such text")
    wait_for_js(page, "document.querySelectorAll('mark.log-match').length === 0")
    assert page.locator(".log-search-count").inner_text() == "no match"
    page.fill(".log-search-input", "")
    wait_for_js(page, "document.querySelector('.log-search-count').textContent === ''")

    # Times on demand: each line shows the time its output was stored.
    time_of_line = "e => getComputedStyle(e, '::before').content"
    first_line = deploy.locator(".log-line").first
    assert first_line.evaluate(time_of_line) in ("none", "normal")
    page.check(".log-times")
    assert first_line.evaluate(time_of_line).strip('"')[2] == ":"
    assert "stored" in page.locator(".log-hint").inner_text()

    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 1000})
        shot(page, f"deployment-log-{width}")

    # The raw log, escape sequences and all, as an attachment.
    with page.expect_download() as download:
        page.click("a.log-download")
    saved = Path(download.value.path()).read_bytes()
    assert download.value.suggested_filename == f"logs-deployment-{deployment.pk}.log"
    assert b"\x1b[1;31mred bold\x1b[0m" in saved and HOSTILE.encode() in saved
    assert b"conveyor: step deploy exited 3" in saved


def test_a_long_log_shows_its_tail_and_loads_earlier_output(admin_page, make_project):
    deployment = deployment_create(project=make_project("long"), ref="main")
    transition(Q(pk=deployment.pk), "running")
    writer = LogWriter(deployment.pk, SecretMasker([]))
    run = StepRun.objects.create(
        deployment=deployment, position=1, name="long", status="success", exit_code=0, log_start=0
    )
    for number in range(3000):  # 300 KB: more than the page's first look (256 KiB)
        writer.write(f"\x1b[36mline {number:04d}\x1b[0m {'.' * 88}\n".encode())
    writer.flush(final=True)
    StepRun.objects.filter(pk=run.pk).update(log_end=writer.end)
    transition(Q(pk=deployment.pk), "success")
    page = admin_page
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    page.wait_for_selector("#deployment-log .log-line", state="attached")  # in a closed step
    lines = page.locator("#deployment-log .log-line")
    first_shown = lines.first.text_content()
    assert first_shown.startswith("line ") and not first_shown.startswith("line 0000")
    assert lines.last.text_content().startswith("line 2999")
    page.click(".log-earlier")
    wait_for_js(
        page,
        "document.querySelector('#deployment-log .log-line').textContent.startsWith('line 0000')",
    )
    assert lines.count() == 3000
    assert page.locator(".log-earlier").is_hidden()
    assert lines.nth(1500).locator("span.ansi-fg6").text_content() == "line 1500"

    # Scrolled into the middle of the step, its header stays at the top of the log box.
    page.locator("#deployment-log details.log-step > summary").click()
    page.eval_on_selector("#deployment-log pre", "pre => { pre.scrollTop = 20000; }")
    head_top = page.eval_on_selector(
        "#deployment-log .log-step-head", "h => h.getBoundingClientRect().top"
    )
    box_top = page.eval_on_selector("#deployment-log pre", "p => p.getBoundingClientRect().top")
    assert abs(head_top - box_top) < 2
    shot(page, "deployment-log-long-scrolled")


def test_a_running_deployments_sections_follow_it_live(admin_page, make_project, start_worker):
    project = make_project(
        "live",
        pipelines={
            "default": [
                {"name": "prepare", "command": r"printf '\033[35mpreparing\n'; sleep 3"},
                {"name": "count", "command": "for i in 1 2 3 4; do echo tick $i; sleep 1; done"},
            ]
        },
    )
    deployment = deployment_create(project=project, ref="main")
    start_worker(queues="deployments", concurrency=1, env=DEPLOY_ENV)
    wait_for(deployment, "running")
    page = admin_page
    page.goto(f"/admin/deployments/deployment/{deployment.pk}/change/")
    page.wait_for_selector("#deployment-log details.log-step")
    first = page.locator("#deployment-log details.log-step").first
    wait_for_js(page, "document.querySelectorAll('#deployment-log details.log-step').length === 2")
    # The first step's header followed it from running to success; the colour it set (and
    # never reset) stays on for the rest of the step, across the page's requests, not after.
    head = first.locator("summary").first
    assert "success" in head.text_content() and "exit 0" in head.text_content()
    assert first.locator("span.ansi-fg5").first.text_content() == "preparing"
    wait_for_js(
        page, "document.querySelector('#deployment-log pre').textContent.includes('tick 4')"
    )
    assert first.locator(".log-line").last.locator("span.ansi-fg5").count() == 1
    second = page.locator("#deployment-log details.log-step").nth(1)
    assert second.locator(".log-line span[class]").count() == 0
    wait_for(deployment, "success")
    wait_for_js(
        page, "document.querySelector('#deployment-log .log-status').textContent === 'complete'"
    )
    text = page.locator("#deployment-log details.log-step").nth(1).text_content()
    assert [text.count(f"tick {i}\n") for i in range(1, 5)] == [1, 1, 1, 1]
