"""Secret masking over a stream cut anywhere: raw values and their base64 forms."""

import base64
import random

import pytest

from deployments.runner.masking import MASK, SecretMasker, base64_forms

SECRET = "hunter2-is-my-password"


def mask_in_pieces(secrets, data: bytes, cuts: list[int]) -> bytes:
    masker = SecretMasker(secrets)
    out, last = [], 0
    for cut in [*sorted(cuts), len(data)]:
        out.append(masker.feed(data[last:cut]))
        last = cut
    out.append(masker.flush())
    return b"".join(out)


def test_a_secret_is_replaced():
    assert mask_in_pieces([SECRET], f"token={SECRET}!".encode(), []) == b"token=***!"


def test_a_secret_split_across_every_possible_boundary_is_still_masked():
    data = f"before {SECRET} after".encode()
    for cut in range(len(data) + 1):
        assert mask_in_pieces([SECRET], data, [cut]) == b"before *** after", cut


def test_random_cuts_give_the_same_result_as_masking_at_once():
    rng = random.Random(4)
    secrets = [SECRET, "abcabd", "zz-top"]
    alphabet = [SECRET.encode(), b"abcab", b"abcabd", b"zz-", b"top", b"x", b"\n", b"ab"]
    for _ in range(300):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        whole = mask_in_pieces(secrets, data, [])
        cuts = [rng.randint(0, len(data)) for _ in range(rng.randint(0, 6))]
        assert mask_in_pieces(secrets, data, cuts) == whole
        assert SECRET.encode() not in whole and b"abcabd" not in whole


def test_nothing_is_held_back_when_no_secret_can_start_there():
    masker = SecretMasker([SECRET])
    assert masker.feed(b"plain output\n") == b"plain output\n"
    assert masker.feed(b"ends with h") == b"ends with "  # 'h' could start the secret
    assert masker.flush() == b"h"


@pytest.mark.parametrize("prefix", [b"", b"u", b"us", b"user:", b"ab:cd"])
def test_base64_of_a_secret_is_masked_wherever_it_sits(prefix):
    encoded = base64.b64encode(prefix + SECRET.encode() + b"\n")
    masked = mask_in_pieces([SECRET], b"auth " + encoded + b"\n", [])
    assert MASK in masked
    assert not any(form in masked for form in base64_forms(SECRET.encode()))
    assert encoded not in masked


def test_no_secrets_passes_everything_through():
    assert mask_in_pieces([], b"anything", [3]) == b"anything"
    assert mask_in_pieces([""], b"anything", [3]) == b"anything"


ENCODED = "dbp@ss/w+rd=9"


@pytest.mark.parametrize(
    ("leak", "expected"),
    [
        ("dbp%40ss%2Fw%2Brd%3D9", "***"),  # percent-encoded, upper-case hex
        ("dbp%40ss%2fw%2brd%3d9", "***"),  # lower-case hex
        ("dbp%40ss/w%2Brd%3D9", "***"),  # '/' kept, as in a URL path
        ("https://app:dbp%40ss%2Fw%2Brd%3D9@db/x", "https://app:***@db/x"),  # inside a URL
        ('{"password": "dbp@ss\\/w+rd=9"}', '{"password": "***"}'),  # JSON, '/' escaped
    ],
)
def test_common_encodings_of_a_secret_are_masked_wherever_the_stream_is_cut(leak, expected):
    data = f"before {leak} after".encode()
    for cut in range(len(data) + 1):
        assert mask_in_pieces([ENCODED], data, [cut]) == f"before {expected} after".encode(), cut


@pytest.mark.parametrize(
    ("secret", "escaped"),
    [
        ('pa"ss\\word', 'pa\\"ss\\\\word'),  # quote and backslash escaped
        ("tab\there-ok", "tab\\there-ok"),
        ("caf\u00e9-secret", "caf\\u00e9-secret"),  # ensure_ascii
        ("caf\u00e9-secret", "caf\u00e9-secret"),
    ],
)
def test_the_json_escaped_form_of_a_secret_is_masked(secret, escaped):
    data = f'{{"v": "{escaped}"}}'.encode()
    assert mask_in_pieces([secret], data, [5, 11]) == b'{"v": "***"}'


@pytest.mark.parametrize("secret", ["k9Zq", "ab", "12345", "short-7"])
def test_the_base64_of_a_short_secret_printed_on_its_own_is_masked(secret):
    encoded = base64.b64encode(secret.encode())
    for form in (encoded, encoded.rstrip(b"=")):
        data = b"value: " + form + b"\n"
        for cut in range(len(data) + 1):
            assert mask_in_pieces([secret], data, [cut]) == b"value: ***\n", (form, cut)


def test_a_secret_printed_half_at_the_end_of_one_step_and_half_in_the_next_is_masked(
    make_project, deploy_worker
):
    from deployments.models import StepRun
    from deployments.services import deployment_create
    from tests.deployments.conftest import log_bytes, wait_for

    first, second = SECRET[:9], SECRET[9:]
    project = make_project(
        secrets={"TOKEN": SECRET},
        pipelines={
            "default": [
                {"name": "one", "command": f"echo start; printf '%s' '{first}'"},
                {"name": "two", "command": f"printf '%s\\n' '{second}'; echo end"},
            ]
        },
    )
    deploy_worker()
    done = wait_for(deployment_create(project=project, ref="main"), "success", "failed")
    assert done.status == "success", done.error
    stored = log_bytes(done)
    assert first.encode() not in stored and second.encode() not in stored, stored
    runs = {run.name: run for run in StepRun.objects.filter(deployment=done)}
    assert b"start\n" in stored[runs["one"].log_start : runs["one"].log_end]
    assert b"***\nend\n" in stored[runs["two"].log_start : runs["two"].log_end]
