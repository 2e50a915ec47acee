"""The page's log: lines by step, group markers, chunk times, whole lines only, colour carried."""

import pytest
from django.db.models import Q
from django.utils import timezone

from deployments.log_page import log_page
from deployments.models import Deployment, LogChunk, StepRun
from deployments.runner.logwriter import LogWriter
from deployments.runner.masking import SecretMasker
from deployments.services import deployment_create
from deployments.transitions import transition

ESC = "\x1b"


@pytest.fixture
def deployment(make_project) -> Deployment:
    deployment = deployment_create(project=make_project(), ref="main")
    transition(Q(pk=deployment.pk), "running")
    return deployment


def run_step(writer: LogWriter, deployment, position: int, name: str, output: str, code: int):
    """Write a step's output as the runner does, recording its log range and exit code."""
    run = StepRun.objects.create(
        deployment=deployment, position=position, name=name, started_at=timezone.now()
    )
    writer.begin_step(run.pk)
    run.log_start = writer.end
    writer.line(f"conveyor: step {position} {name}")
    writer.write(output.encode())
    writer.line(f"conveyor: step {name} exited {code}")
    writer.flush()
    run.log_end, run.exit_code, run.finished_at = writer.end, code, timezone.now()
    run.status = "success" if code == 0 else "failed"
    run.save()
    return run


EVERY_STEP = object()


def texts(page, step=EVERY_STEP) -> list[str]:
    """Return the text of the page's lines (of one step, or outside steps with None)."""
    return [
        "".join(t for _, t in line["c"])
        for line in page["lines"]
        if step is EVERY_STEP or line["s"] == step
    ]


def test_lines_fall_into_their_steps_and_markers_open_groups(deployment):
    writer = LogWriter(deployment.pk, SecretMasker([]))
    writer.line("conveyor: checkout")
    build = run_step(
        writer,
        deployment,
        1,
        "build",
        f"--- {ESC}[1mCompiling{ESC}[0m\ncc main.c\n+++ Tests\nok\n",
        0,
    )
    test = run_step(writer, deployment, 2, "test", f"boom {ESC}[31mred, never reset\n", 1)
    writer.line("conveyor: after the steps")
    writer.flush()
    transition(Q(pk=deployment.pk), "failed")
    page = log_page(deployment=deployment, offset=0, limit_bytes=1 << 20)

    assert texts(page, None) == ["conveyor: checkout", "conveyor: after the steps"]
    assert texts(page, build.pk) == [
        "conveyor: step 1 build",
        "Compiling",
        "cc main.c",
        "Tests",
        "ok",
        "conveyor: step build exited 0",
    ]
    groups = [(line["g"], line["c"]) for line in page["lines"] if "g" in line]
    assert groups == [("closed", [["ansi-bold", "Compiling"]]), ("open", [["", "Tests"]])]
    assert texts(page, test.pk) == [
        "conveyor: step 2 test",
        "boom red, never reset",
        "conveyor: step test exited 1",
    ]
    # A colour a step leaves on ends with the step.
    assert [line["c"] for line in page["lines"] if line["s"] == test.pk][2] == [
        ["ansi-fg1", "conveyor: step test exited 1"]
    ]
    assert page["lines"][-1]["c"] == [["", "conveyor: after the steps"]]
    assert page["complete"] and page["next_offset"] == writer.end
    steps = {s["name"]: s for s in page["steps"]}
    assert steps["test"]["exit_code"] == 1 and steps["test"]["status"] == "failed"
    assert steps["build"]["started_at"] and steps["build"]["duration"] is not None


def test_each_line_carries_the_time_its_chunk_was_stored(deployment):
    writer = LogWriter(deployment.pk, SecretMasker([]))
    writer.write(b"one\ntwo\n")
    writer.flush()
    writer.write(b"three\n")
    writer.flush()
    first, second = LogChunk.objects.filter(deployment=deployment).order_by("sequence")
    LogChunk.objects.filter(pk=first.pk).update(created_at=timezone.now() - timezone.timedelta(1))
    first.refresh_from_db()
    page = log_page(deployment=deployment, offset=0, limit_bytes=1 << 20)
    times = [line["t"] for line in page["lines"]]
    assert times == [first.created_at.isoformat()] * 2 + [second.created_at.isoformat()]


def test_a_running_log_is_read_in_whole_lines_and_its_colour_carries_over(deployment):
    writer = LogWriter(deployment.pk, SecretMasker([]))
    writer.write(f"{ESC}[31mred starts\nhalf a li".encode())
    writer.flush()
    page = log_page(deployment=deployment, offset=0, limit_bytes=1 << 20)
    assert texts(page) == ["red starts"] and not page["complete"]
    assert page["next_offset"] == len(f"{ESC}[31mred starts\n".encode())
    assert page["style"] == "ansi-fg1"

    writer.write(b"ne\n")
    writer.flush()
    more = log_page(
        deployment=deployment, offset=page["next_offset"], limit_bytes=1 << 20, style=page["style"]
    )
    assert more["lines"][0]["c"] == [["ansi-fg1", "half a line"]]


def test_a_tail_starts_at_a_whole_line(deployment):
    writer = LogWriter(deployment.pk, SecretMasker([]))
    writer.write(b"first line\nsecond line\n")
    writer.flush()
    transition(Q(pk=deployment.pk), "success")
    page = log_page(deployment=deployment, offset=4, limit_bytes=1 << 20, from_line_start=True)
    assert texts(page) == ["second line"] and page["start"] == len(b"first line\n")
