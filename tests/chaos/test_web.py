"""Scenario 7: the web process killed (kill -9, master and workers) during a burst of
``POST …/deployments`` with Idempotency-Keys, the clients retrying: one deployment per key."""

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict

import pytest

from deployments.models import Deployment
from project.access.tokens import token_create
from tests.chaos.load import Load, drain, make_project, verify
from tests.chaos.servers import port_answers
from tests.processes import ROOT, free_port, process_tree, wait_until

pytestmark = pytest.mark.chaos
KEYS = 60
CLIENTS = 6


class Web:
    """gunicorn on a fixed free port, restartable on the same port."""

    def __init__(self, env: dict) -> None:
        self.env = env
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        gunicorn = str(ROOT / ".venv" / "bin" / "gunicorn")
        self.process = subprocess.Popen(
            [gunicorn, "project.wsgi", "--bind", f"127.0.0.1:{self.port}", "--workers", "2",
             "--worker-class", "gthread", "--threads", "4", "--timeout", "30"],
            cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        wait_until(lambda: port_answers(self.port), timeout=60, message="gunicorn to listen")

    def kill(self) -> None:
        for pid in [self.process.pid, *process_tree(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def test_web_killed_during_an_idempotent_burst(chaos, worker_env, tmp_path, summary):
    project = make_project(tmp_path / "step-pids")
    token, raw = token_create(name="chaos", scope="deploy")
    project.api_tokens.add(token)
    web = Web({**worker_env, "CONVEYOR_WEBHOOKS_ALLOW_PRIVATE": "true"})
    web.start()
    answers: dict[str, set[int]] = defaultdict(set)
    retries = [0]
    lock = threading.Lock()

    def trigger(n: int) -> None:
        key = f"chaos-key-{n}"
        body = json.dumps({"ref": "main", "environment": f"env{n}"}).encode()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            request = urllib.request.Request(
                f"http://127.0.0.1:{web.port}/api/v1/projects/chaos/deployments",
                data=body,
                method="POST",
                headers={"Authorization": f"Bearer {raw}", "Idempotency-Key": key,
                         "Content-Type": "application/json"},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    with lock:
                        answers[key].add(json.loads(response.read())["id"])
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                if isinstance(exc, urllib.error.HTTPError) and exc.code < 500:
                    raise
                with lock:
                    retries[0] += 1
                time.sleep(0.1)

    def client(start: int) -> None:
        for n in range(start, KEYS, CLIENTS):
            trigger(n)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    kills = 0
    for _ in range(2):
        time.sleep(0.7)
        web.kill()
        kills += 1
        web.start()
    for thread in threads:
        thread.join(timeout=120)
    web.kill()
    assert len(answers) == KEYS, f"{KEYS - len(answers)} key(s) never answered"
    assert all(len(ids) == 1 for ids in answers.values()), "a key answered two deployments"
    rows = list(Deployment.objects.filter(project=project).values_list("idempotency_key", "pk"))
    per_key = defaultdict(list)
    for key, pk in rows:  # stored per token: "<token id>:<key>"
        per_key[key.split(":", 1)[1]].append(pk)
    duplicated = sum(1 for pks in per_key.values() if len(pks) > 1)
    assert duplicated == 0 and len(per_key) == KEYS
    assert {key: {pks[0]} for key, pks in per_key.items()} == dict(answers)

    chaos(concurrency=2)
    load = Load(job_ids=[], deployment_ids=[pk for _, pk in rows], pids=tmp_path / "step-pids")
    drained = drain(load, timeout=120)
    verify(load)
    summary.jobs = KEYS
    summary.faults = kills
    summary.drain = drained
    summary.note = f"{retries[0]} client retries; one deployment per key, every one ran"
    assert retries[0] >= 1, "no request met the kill"
