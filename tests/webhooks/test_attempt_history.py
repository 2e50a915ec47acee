"""A delivery's attempts on its admin page: numbered through replays, truly labelled, escaped."""

import json
import re

import pytest
from django.db.models import Q
from django.test import Client
from django.utils import timezone

from jobs.services import job_bury, job_claim
from tests.webhooks.receiver import Reply
from tests.webhooks.test_delivery import make_endpoint, wait_delivery
from webhooks import notify, services
from webhooks.attempt_history import attempt_rows, pretty_body
from webhooks.models import DeliveryAttempt, DeliveryStatus

HOSTILE = "<script>alert('owned')</script>"


def page_of(admin_user, delivery) -> str:
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(admin_user)
    response = client.get(f"/admin/webhooks/delivery/{delivery.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def attempt_cells(page: str) -> list[list[str]]:
    """Each attempt row's cells as text (tags dropped), in page order."""
    table = page[page.index('id="delivery-attempts"') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr[^>]*data-attempt[^>]*>(.*?)</tr>", table, re.S)
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)
        ]
        for r in rows
    ]


def test_a_replay_numbers_on_and_a_dead_end_is_not_a_retry(
    receiver, webhook_worker, allow_private, settings, admin_user
):
    settings.CONVEYOR_WEBHOOK_MAX_ATTEMPTS = 2
    make_endpoint(receiver, topics=["job.dead"])
    answer = json.dumps({"ok": True, "note": HOSTILE}).encode()
    receiver.script("/hook", Reply(500, b"busy"), Reply(503, b"still busy"), Reply(200, answer))
    webhook_worker()
    (delivery,) = notify("job.dead", {"job_id": 1}).deliveries.all()
    delivery = wait_delivery(delivery.pk, DeliveryStatus.DEAD, DeliveryStatus.DELIVERED)
    assert delivery.status == DeliveryStatus.DEAD
    assert [a.outcome for a in delivery.attempts.all()] == ["retry", "retry"]  # as stored

    cells = attempt_cells(page_of(admin_user, delivery))
    assert [(c[0], c[2]) for c in cells] == [("1", "retry"), ("2", "dead")]

    services.delivery_replay(delivery_id=delivery.pk, actor="test")
    delivery = wait_delivery(delivery.pk, DeliveryStatus.DELIVERED)
    assert [a.number for a in delivery.attempts.all()] == [1, 2, 1]  # the new job's own count
    page = page_of(admin_user, delivery)
    cells = attempt_cells(page)
    assert [(c[0], c[2]) for c in cells] == [
        ("1", "retry"),
        ("2", "dead"),
        ("3 replay", "delivered"),
    ]
    # The JSON answer is indented, and its markup escaped, never live.
    body = re.search(
        r'<tr[^>]*data-attempt="3".*?<pre class="console-pre response-body">(.*?)</pre>', page, re.S
    )
    assert body.group(1).startswith("{\n  &quot;ok&quot;: true,\n  &quot;note&quot;: ")
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in body.group(1)
    assert HOSTILE not in page
    # The endpoint's last failures (newest first) read the same.
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(admin_user)
    endpoint_page = client.get(f"/admin/webhooks/endpoint/{delivery.endpoint_id}/change/")
    table = endpoint_page.content.decode().split('id="endpoint-failures"')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td class=\"at\">.*?</tr>", table, re.S)
    cells = [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]
    assert [(c[2], c[3]) for c in cells] == [("2", "dead"), ("1", "retry")]


@pytest.mark.django_db
def test_a_hostile_or_broken_body_is_shown_escaped_as_it_came(admin_user, allow_private):
    endpoint = services.endpoint_create(
        url="https://93.184.215.14/hook", topics=["job.dead"], actor="test"
    )
    (delivery,) = notify("job.dead", {"job_id": 1}).deliveries.all()
    job = job_claim(delivery.job_id, worker="test/1")
    bodies = [f"<html><body>{HOSTILE}</body></html>", '{"cut": "at 4 Ki', "[" * 3000]
    for number, body in enumerate(bodies, start=1):
        DeliveryAttempt.objects.create(
            delivery=delivery,
            job_id=job.pk,
            number=number,
            started_at=timezone.now(),
            status_code=500,
            response_body=body,
            outcome="retry",
        )
    page = page_of(admin_user, delivery)  # the delivery is still pending: its job may retry
    assert [(c[0], c[2]) for c in attempt_cells(page)] == [
        ("1", "retry"),
        ("2", "retry"),
        ("3", "retry"),
    ]
    assert HOSTILE not in page and "&lt;script&gt;alert(&#x27;owned&#x27;)" in page
    assert "{&quot;cut&quot;: &quot;at 4 Ki" in page
    job_bury(Q(pk=job.pk), error="DeliveryFailed: HTTP 500")
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DEAD and endpoint.pk == delivery.endpoint_id
    cells = attempt_cells(page_of(admin_user, delivery))
    assert [c[2] for c in cells] == ["retry", "retry", "dead"]


def test_pretty_body_indents_json_only():
    assert pretty_body('{"a":[1,2]}') == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert pretty_body(' ["é"] ') == '[\n  "é"\n]'
    for as_is in ("ok", '"a string"', "42", '{"a":', "[" * 5000, ""):
        assert pretty_body(as_is) == as_is


def test_attempt_rows_number_through_jobs_and_label_each_run_end():
    def attempt(pk, job_id, number, outcome):
        return DeliveryAttempt(id=pk, job_id=job_id, number=number, outcome=outcome)

    attempts = [
        attempt(1, 10, 1, "retry"),
        attempt(2, 10, 2, "retry"),  # job 10 ended here: the delivery died
        attempt(3, 11, 1, "failed"),  # replay 1: a permanent failure keeps its label
        attempt(4, 12, 1, "retry"),  # replay 2, still pending: a retry is to come
    ]
    rows = attempt_rows(attempts, delivery_status=DeliveryStatus.PENDING)
    assert [(r.number, r.replay, r.outcome) for r in rows] == [
        (1, 0, "retry"),
        (2, 0, "dead"),
        (3, 1, "failed"),
        (4, 2, "retry"),
    ]
    assert rows[1].outcome_note and not rows[0].outcome_note
    rows = attempt_rows(attempts, delivery_status=DeliveryStatus.DEAD)
    assert rows[-1].outcome == "dead"
    assert attempt_rows([], delivery_status=DeliveryStatus.DEAD) == []
