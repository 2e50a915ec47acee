"""Scenario 6: a webhook receiver that flaps between 500, timeouts, resets and 200."""

import random
from collections import Counter

import pytest

from tests.chaos.load import drain, start_load, verify
from tests.webhooks.receiver import Receiver, Reply
from webhooks import notify

pytestmark = pytest.mark.chaos
FAILURES = {
    "500": Reply(status=500),
    "timeout": Reply(delay=2.0),  # the worker gives up after CONVEYOR_WEBHOOK_TIMEOUT (1s)
    "reset": Reply(reset=True),
    "503": Reply(status=503),
}


class FlappingReceiver(Receiver):
    """Each webhook-id first gets three failures (a random mix), then 200."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.attempts: Counter = Counter()
        self.replies: list[tuple[str, str]] = []  # (webhook-id, what it got)

    def record(self, request):
        super().record(request)
        with self._lock:
            key = request.header("webhook-id")
            self.attempts[key] += 1
            kind = "200" if self.attempts[key] > 3 else self.rng.choice(sorted(FAILURES))
            self.replies.append((key, kind))
            return FAILURES.get(kind, Reply())


@pytest.fixture
def flapping():
    server = FlappingReceiver(seed=6)
    yield server
    server.close()


def test_a_flapping_receiver_gets_every_event(chaos, flapping, tmp_path, summary):
    chaos(concurrency=2)
    load = start_load(jobs=200, deployments=4, receiver=flapping, tmp_path=tmp_path)
    for n in range(20):
        notify("deployment.succeeded", {"deployment": 1000 + n, "ref": "main"})
    drained = drain(load, timeout=90)
    verdict = verify(load, flapping)
    ok = Counter(key for key, kind in flapping.replies if kind == "200")
    assert set(ok) == {r.header("webhook-id") for r in flapping.received()}
    kinds = Counter(kind for _, kind in flapping.replies if kind != "200")
    faults = sum(kinds.values())
    summary.jobs = len(load.job_ids) + len(load.deployment_ids) + verdict.deliveries
    summary.faults = faults
    summary.duplicated = sum(1 for count in ok.values() if count > 1)
    summary.drain = drained
    summary.note = f"{verdict.deliveries} deliveries, 3 failures each then 200: {dict(kinds)}"
    assert faults == 3 * verdict.deliveries and set(kinds) == set(FAILURES)
