"""The logs endpoint's text: escape sequences stripped by default, kept with ``ansi=true``."""

import time

from django.db.models import Q

from deployments.models import LogChunk
from deployments.runner.logwriter import LogWriter
from deployments.runner.masking import SecretMasker
from deployments.services import deployment_create
from deployments.transitions import transition

ESC = "\x1b"
RAW = f"{ESC}[1;32mok{ESC}[0m {ESC}]0;title\x07done{ESC}[2K\n"


def written(make_project, *pieces: bytes, finished: bool = True):
    deployment = deployment_create(project=make_project(), ref="main")
    transition(Q(pk=deployment.pk), "running")
    writer = LogWriter(deployment.pk, SecretMasker([]))
    for piece in pieces:
        writer.write(piece)
        writer.flush()
    if finished:
        transition(Q(pk=deployment.pk), "success")
    return deployment


def test_the_text_is_plain_unless_ansi_is_asked_for(make_project, make_api):
    deployment = written(make_project, RAW.encode())
    api = make_api("admin")
    plain = api.get(f"/deployments/{deployment.pk}/logs").json()
    assert plain == {"text": "ok done\n", "next_offset": len(RAW.encode()), "complete": True}
    raw = api.get(f"/deployments/{deployment.pk}/logs", ansi="true").json()
    assert raw == {"text": RAW, "next_offset": len(RAW.encode()), "complete": True}


def test_an_escape_cut_by_the_limit_is_never_shown_in_part(make_project, make_api):
    deployment = written(make_project, RAW.encode())
    api = make_api("admin")
    # A limit inside the first sequence (ESC [ 1): the sequence is read whole, and stripped.
    first = api.get(f"/deployments/{deployment.pk}/logs", limit=3).json()
    assert first == {"text": "", "next_offset": len(f"{ESC}[1;32m"), "complete": False}
    # A limit inside a later one: the text stops before it.
    second = api.get(f"/deployments/{deployment.pk}/logs", limit=12).json()
    assert second == {"text": "ok", "next_offset": len(f"{ESC}[1;32mok"), "complete": False}
    pieces, offset = [], 0
    while True:
        page = api.get(f"/deployments/{deployment.pk}/logs", offset=offset, limit=12).json()
        pieces.append(page["text"])
        offset = page["next_offset"]
        if page["complete"]:
            break
    assert "".join(pieces) == "ok done\n"


def test_a_running_log_holds_an_unfinished_sequence_at_its_end(make_project, make_api):
    deployment = written(make_project, b"step \x1b[3", finished=False)
    api = make_api("admin")
    page = api.get(f"/deployments/{deployment.pk}/logs").json()
    assert page == {"text": "step ", "next_offset": 5, "complete": False}
    # The rest arrives: the whole sequence is stripped.
    writer = LogWriter(deployment.pk, SecretMasker([]))
    last = LogChunk.objects.filter(deployment=deployment).order_by("-sequence").first()
    writer.offset, writer.sequence = last.offset + last.size, last.sequence + 1
    writer.write(b"1mred\n")
    writer.flush()
    page = api.get(f"/deployments/{deployment.pk}/logs", offset=5).json()
    assert page["text"] == "red\n"


def test_a_long_poll_answers_once_it_read_past_escapes_that_strip_to_nothing(
    make_project, make_api
):
    deployment = written(make_project, b"\x1b[2K\x1b[1G", finished=False)
    api = make_api("admin")
    began = time.monotonic()
    page = api.get(f"/deployments/{deployment.pk}/logs", wait=5).json()
    assert page == {"text": "", "next_offset": 8, "complete": False}
    assert time.monotonic() - began < 3  # it did not wait for text that will never come
