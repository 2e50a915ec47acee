"""Logs: append-only chunks (sequence, offset), the reader, masking and bounded memory."""

import base64
import time
from pathlib import Path

import pytest

from deployments.conf import LOG_CHUNK_BYTES, LOG_FLUSH_SECONDS
from deployments.models import Deployment, LogChunk
from deployments.runner.logwriter import LogWriter
from deployments.runner.masking import SecretMasker
from deployments.selectors import deployment_logs
from deployments.services import deployment_create
from deployments.transitions import transition
from tests.deployments.conftest import log_bytes, log_text, wait_for
from tests.processes import wait_until

MIB = 1024 * 1024


@pytest.fixture
def deployment(make_project) -> Deployment:
    return deployment_create(project=make_project(), ref="main")


def test_the_writer_stores_full_chunks_at_once_and_the_rest_on_flush(deployment):
    writer = LogWriter(deployment.pk, SecretMasker([]))
    writer.write(b"a" * (LOG_CHUNK_BYTES + 10))
    chunks = list(LogChunk.objects.filter(deployment=deployment).order_by("sequence"))
    assert [(c.sequence, c.offset, c.size) for c in chunks] == [(0, 0, LOG_CHUNK_BYTES)]
    if time.monotonic() - writer._last_flush < LOG_FLUSH_SECONDS:
        writer.tick()  # under a second since the last store: nothing yet
        assert LogChunk.objects.filter(deployment=deployment).count() == 1
    stored_at = writer._last_flush

    def stored_on_time():
        writer.tick()
        return LogChunk.objects.filter(deployment=deployment).count() == 2

    wait_until(stored_on_time, timeout=10, interval=0.05, message="the time-based flush")
    assert writer._last_flush - stored_at >= LOG_FLUSH_SECONDS  # not before its second was up
    chunks = list(LogChunk.objects.filter(deployment=deployment).order_by("sequence"))
    assert [(c.sequence, c.offset, c.size) for c in chunks] == [
        (0, 0, LOG_CHUNK_BYTES),
        (1, LOG_CHUNK_BYTES, 10),
    ]
    writer.flush(final=True)  # nothing left: no empty chunk
    assert LogChunk.objects.filter(deployment=deployment).count() == 2


def test_the_reader_pages_through_the_log_without_splitting_characters(deployment):
    writer = LogWriter(deployment.pk, SecretMasker([]))
    text = "héllo wörld ✓ " * 20000  # multi-byte characters across chunk boundaries
    writer.write(text.encode())
    writer.flush(final=True)
    transition_done(deployment)
    pieces, offset = [], 0
    while True:
        page = deployment_logs(deployment=deployment, offset=offset, limit_bytes=9999)
        pieces.append(page["text"])
        assert page["next_offset"] > offset or page["complete"]
        offset = page["next_offset"]
        if page["complete"]:
            break
    assert "".join(pieces) == text
    assert offset == len(text.encode())
    assert deployment_logs(deployment=deployment, offset=offset) == {
        "text": "",
        "next_offset": offset,
        "complete": True,
    }


def test_an_unfinished_deployment_is_never_complete(deployment):
    writer = LogWriter(deployment.pk, SecretMasker([]))
    writer.write(b"partial\n")
    writer.flush(final=True)
    page = deployment_logs(deployment=deployment, offset=0)
    assert page == {"text": "partial\n", "next_offset": 8, "complete": False}


def transition_done(deployment: Deployment) -> None:
    from django.db.models import Q

    transition(Q(pk=deployment.pk), "running")
    transition(Q(pk=deployment.pk), "success")


def test_secrets_are_masked_in_stored_logs(make_project, deploy_worker):
    secret = "s3cr3t-Value-9876"
    b64 = base64.b64encode(f"deploy:{secret}".encode()).decode()
    project = make_project(
        secrets={"TOKEN": secret},
        pipelines={
            "default": [
                {
                    "name": "leaky",
                    "command": (
                        'echo "token=$TOKEN"; '
                        'printf "%s" "$TOKEN" | base64; '
                        f'echo "basic {b64}"; '
                        # split across a chunk boundary, and across a flush in time
                        f"head -c {LOG_CHUNK_BYTES - 5} /dev/zero | tr '\\0' x; echo \"$TOKEN\"; "
                        'printf "%s" "s3cr3t-"; sleep 1.5; printf "%s\\n" "Value-9876"'
                    ),
                }
            ]
        },
    )
    deploy_worker()
    done = wait_for(deployment_create(project=project, ref="main"), "success", "failed")
    assert done.status == "success"
    stored = log_bytes(done)
    assert secret.encode() not in stored
    assert base64.b64encode(secret.encode()) not in stored
    assert b64.encode() not in stored
    assert b"token=***" in stored and stored.count(b"***") >= 5


def vm_peak_kib(pid: int, field: str = "VmHWM") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_50_mb_of_output_is_stored_completely_with_bounded_worker_memory(
    make_project, deploy_worker
):
    size = 50 * MIB
    line = b"0" * 99 + b"\n"
    project = make_project(
        pipelines={
            "default": [{"name": "flood", "command": f"yes {line[:-1].decode()} | head -c {size}"}],
            "warm": [{"name": "warm", "command": "echo warm"}],
        }
    )
    deploy_worker()  # concurrency 1: one pool child runs both deployments
    warm = wait_for(deployment_create(project=project, ref="main", pipeline="warm"), "success")
    pool_child = int(warm.worker.rsplit("/", 1)[1])
    Path(f"/proc/{pool_child}/clear_refs").write_text("5")  # reset the peak RSS counter
    before = vm_peak_kib(pool_child, "VmRSS")

    done = wait_for(
        deployment_create(project=project, ref="main"), "success", "failed", timeout=240
    )
    assert done.status == "success"
    growth_mib = (vm_peak_kib(pool_child) - before) / 1024
    assert growth_mib < 32, f"the worker's peak RSS grew by {growth_mib:.1f} MiB"
    sizes = list(LogChunk.objects.filter(deployment=done).values_list("size", flat=True))
    assert max(sizes) <= LOG_CHUNK_BYTES
    text = log_text(done)
    body = text[text.index("\n") + 1 : text.rindex("conveyor: step")]
    assert len(body) == size and body == (line * (size // len(line) + 1))[:size].decode()
