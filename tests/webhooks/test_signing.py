"""Secrets and signatures: Standard Webhooks and seed 003's X-Conveyor-Signature."""

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from standardwebhooks import Webhook

from deployments.events import event_data
from tests.webhooks.conftest import seed_verify
from webhooks.signing import (
    active_secrets,
    conveyor_signature,
    generate_secret,
    secret_key,
    signature_headers,
    standard_signature,
)

BODY = b'{"id":"evt_1","type":"job.dead","timestamp":"2026-01-01T00:00:00Z","data":{}}'


def test_a_secret_is_whsec_and_base64_of_32_random_bytes():
    secret = generate_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert secret_key(secret) == base64.b64decode(secret[6:])
    assert generate_secret() != secret


def test_a_secret_that_is_not_base64_is_refused():
    with pytest.raises(ValueError):
        secret_key("whsec_not*base64!")


def test_the_standard_signature_is_what_the_standardwebhooks_library_computes():
    secret, now = generate_secret(), datetime.now(UTC)
    ours = standard_signature(secret, message_id="evt_1", timestamp=int(now.timestamp()), body=BODY)
    assert ours == Webhook(secret).sign("evt_1", now, BODY.decode())


def test_the_conveyor_signature_is_seed_003s_recipe():
    secret = generate_secret()
    signature = conveyor_signature(secret, timestamp=1700000000, body=BODY)
    assert signature.startswith("sha256=") and len(signature) == 7 + 64
    headers = {"X-Conveyor-Timestamp": "1700000000", "X-Conveyor-Signature": signature}
    assert seed_verify(secret, headers, BODY)
    assert not seed_verify(generate_secret(), headers, BODY)
    assert not seed_verify(secret, headers, BODY + b" ")


def test_headers_with_one_secret_verify_both_ways_and_name_the_event():
    secret, ts = generate_secret(), int(datetime.now(UTC).timestamp())
    headers = signature_headers(
        [secret], message_id="evt_1", topic="job.dead", timestamp=ts, body=BODY
    )
    assert Webhook(secret).verify(BODY, headers)["id"] == "evt_1"
    assert seed_verify(secret, headers, BODY)
    assert headers["webhook-id"] == headers["X-Conveyor-Event-Id"] == "evt_1"
    assert headers["webhook-timestamp"] == headers["X-Conveyor-Timestamp"] == str(ts)
    assert headers["X-Conveyor-Topic"] == "job.dead"
    assert "X-Conveyor-Signature-Previous" not in headers


def test_during_an_overlap_both_secrets_verify_and_a_third_does_not():
    new, old, ts = generate_secret(), generate_secret(), int(datetime.now(UTC).timestamp())
    headers = signature_headers([new, old], message_id="evt_1", topic="t", timestamp=ts, body=BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(new).verify(BODY, headers)
    Webhook(old).verify(BODY, headers)
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(generate_secret()).verify(BODY, headers)
    assert seed_verify(new, headers, BODY)
    previous = {**headers, "X-Conveyor-Signature": headers["X-Conveyor-Signature-Previous"]}
    assert seed_verify(old, previous, BODY)


def test_the_previous_secret_signs_until_it_expires_and_not_after():
    now = datetime.now(UTC)
    endpoint = SimpleNamespace(
        secret="whsec_new", previous_secret="whsec_old", previous_secret_expires_at=now
    )
    assert active_secrets(endpoint, now - timedelta(seconds=1)) == ["whsec_new", "whsec_old"]
    assert active_secrets(endpoint, now) == ["whsec_new"]
    endpoint.previous_secret = ""
    assert active_secrets(endpoint, now - timedelta(hours=1)) == ["whsec_new"]


def test_the_example_request_in_the_docs_verifies_both_ways():
    text = (Path(__file__).resolve().parents[2] / "docs" / "webhooks.md").read_text()
    block = text.split("## The request", 1)[1].split("```", 2)[1]
    head, body = block.strip("\n").split("\n\n", 1)
    headers = dict(line.split(": ", 1) for line in head.splitlines()[1:])
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    timestamp = int(headers["webhook-timestamp"])
    assert headers["webhook-signature"] == standard_signature(
        secret, message_id=headers["webhook-id"], timestamp=timestamp, body=body.encode()
    )
    assert seed_verify(secret, headers, body.encode())
    # and its data is what a deployment.failed event carries
    deployment = SimpleNamespace(
        pk=42,
        project=SimpleNamespace(slug="demo"),
        environment="production",
        ref="main",
        commit_sha="9fceb02d0ae598e95dc970b74767f19372d61af8",
        status="failed",
        failure_reason="step_failed",
        pipeline_name="deploy",
        attempt=1,
        retry_of_id=None,
        rollback_of_id=None,
        triggered_by="token:ci",
    )
    assert json.loads(body)["data"] == event_data(deployment)
