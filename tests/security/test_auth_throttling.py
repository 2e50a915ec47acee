"""Failed authentication is throttled, and the throttle cannot be aimed at anyone else.

Admin logins are counted per (username, address) pair; API tokens per address, but a valid
token is never refused. /metrics is throttled like the API.

The API test runs two real gunicorn processes against one database, on PostgreSQL and on
the embedded SQLite default: the failures counted by one process lock the client out of the
other. Clients are told apart by ``X-Forwarded-For`` behind one trusted proxy.
"""

import math
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import requests
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from project.access.tokens import token_create
from tests.processes import PYTHON, ROOT, WebServer

ATTACKER, HONEST, CROWD = "203.0.113.7", "198.51.100.2", "203.0.113.99"
LIMIT = 10  # the default CONVEYOR_AUTH_FAILURE_LIMIT
LOCKOUT_SECONDS = 900  # the default CONVEYOR_AUTH_LOCKOUT, 15m


def _get(server: WebServer, token: str, address: str) -> requests.Response:
    return requests.get(
        f"{server.url}/api/v1/queue",
        headers={"Authorization": f"Bearer {token}", "X-Forwarded-For": address},
        timeout=30,
    )


@pytest.fixture(params=["postgresql", "sqlite"])
def web_pair(request, worker_env, tmp_path):
    """Two web processes sharing one database; yields (servers, a valid admin token)."""
    env = {**worker_env, "CONVEYOR_PROXY_COUNT": "1"}
    if request.param == "postgresql":
        token = token_create(name="ci", scope="admin")[1]
    else:  # the embedded default: no DATABASE_URL, no broker URL
        env.pop("DATABASE_URL")
        env.pop("CELERY_BROKER_URL")
        env["CONVEYOR_VAR_DIR"] = str(tmp_path / "embedded")
        manage = [PYTHON, "manage.py"]
        subprocess.run([*manage, "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                       capture_output=True)  # fmt: skip
        created = subprocess.run([*manage, "create_api_token", "--scope", "admin"], cwd=ROOT,
                                 env=env, check=True, capture_output=True, text=True)  # fmt: skip
        token = created.stdout.strip().splitlines()[-1]
    servers = [WebServer(env), WebServer(env)]
    yield servers, token
    for server in servers:
        server.stop()


def test_failures_in_one_web_process_lock_the_client_out_of_both(web_pair):
    servers, token = web_pair
    assert _get(servers[0], token, ATTACKER).status_code == 200  # success is never counted

    for attempt in range(LIMIT - 1):
        answer = _get(servers[attempt % 2], "cvy_wrong-guess", ATTACKER)
        assert answer.status_code == 401, (attempt, answer.text)
    # The failure that reaches the limit is already answered 429.
    assert _get(servers[1], "cvy_wrong-guess", ATTACKER).status_code == 429

    for server in servers:
        locked = _get(server, "cvy_another-guess", ATTACKER)
        assert locked.status_code == 429, locked.text
        assert locked.headers["Retry-After"] == str(LOCKOUT_SECONDS)
        error = locked.json()["error"]
        assert set(error) == {"code", "message", "details"}
        assert error["code"] == "too_many_requests" and error["details"]["retry_after"] == 900
        # Only bad tokens are locked out: the right token from that address still works,
        # and using it neither lifts nor extends the lock.
        before = list(AccessAttempt.objects.values_list("attempt_time", "failures_since_start"))
        assert _get(server, token, ATTACKER).status_code == 200
        after = list(AccessAttempt.objects.values_list("attempt_time", "failures_since_start"))
        assert before == after
        assert _get(server, "cvy_yet-another-guess", ATTACKER).status_code == 429
        # Everyone else goes on as before.
        assert _get(server, token, HONEST).status_code == 200


def test_a_parallel_flood_of_wrong_tokens_is_cut_off(web_pair):
    servers, _ = web_pair
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(lambda i: _get(servers[i % 2], f"cvy_guess{i}", CROWD).status_code, range(60))
        )
    assert set(answers) <= {401, 429}
    # Requests already past the check when the limit is reached may still get 401; no more.
    assert answers.count(401) <= LIMIT + 8, answers
    assert answers.count(429) >= 60 - LIMIT - 8


@pytest.fixture
def admin_user(db):
    return get_user_model().objects.create_superuser("admin", "a@example.com", "right-pass-1")


def _login(password: str, address: str, username: str = "admin"):
    client = Client(REMOTE_ADDR=address)
    response = client.post(
        "/admin/login/?next=/admin/", {"username": username, "password": password}
    )
    return response, client.session.get("_auth_user_id")


def test_wrong_passwords_for_a_username_from_other_addresses_never_lock_its_owner_out(
    admin_user,
):
    for attempt in range(LIMIT):
        response, user_id = _login("wrong", f"192.0.2.{attempt + 1}")
        assert response.status_code == 200 and user_id is None  # the form again
    for _ in range(LIMIT):  # and ten more from one other address
        _login("wrong", ATTACKER)
    response, user_id = _login("right-pass-1", HONEST)
    assert response.status_code == 302 and user_id == str(admin_user.pk)


def test_wrong_passwords_lock_the_username_and_address_pair_only(admin_user):
    for _ in range(LIMIT - 1):
        response, _ = _login("wrong", ATTACKER)
        assert response.status_code == 200
    last_failure = time.monotonic()
    response, _ = _login("wrong", ATTACKER)  # the failure that reaches the limit
    assert response.status_code == 429

    response, user_id = _login("right-pass-1", ATTACKER)
    assert response.status_code == 429 and user_id is None
    # what is left of the lock: the whole of it, less the time since that failure counted
    since = math.ceil(time.monotonic() - last_failure)
    assert LOCKOUT_SECONDS - since <= int(response["Retry-After"]) <= LOCKOUT_SECONDS
    assert "Too many failed login attempts" in response.content.decode()
    get_user_model().objects.create_user("other", "o@example.com", "other-pass-1", is_staff=True)
    response, user_id = _login("other-pass-1", ATTACKER, username="other")
    assert response.status_code == 302 and user_id is not None
    response, user_id = _login("right-pass-1", HONEST)
    assert response.status_code == 302 and user_id == str(admin_user.pk)


def test_an_attempt_refused_while_locked_out_does_not_extend_the_lock(admin_user):
    for _ in range(LIMIT):
        _login("wrong", ATTACKER)
    locked = AccessAttempt.objects.get(username="admin", ip_address=ATTACKER)
    for password in ("right-pass-1", "wrong"):
        response, _ = _login(password, ATTACKER)
        assert response.status_code == 429
    again = AccessAttempt.objects.get(pk=locked.pk)
    assert (again.attempt_time, again.failures_since_start) == (
        locked.attempt_time,
        locked.failures_since_start,
    )


def test_retry_after_is_what_is_left_of_the_lock(admin_user):
    for _ in range(LIMIT):
        _login("wrong", ATTACKER)
    AccessAttempt.objects.filter(ip_address=ATTACKER).update(
        attempt_time=timezone.now() - timedelta(seconds=120)
    )  # the last failure was two minutes ago
    response, _ = _login("right-pass-1", ATTACKER)
    assert response.status_code == 429
    assert LOCKOUT_SECONDS - 122 <= int(response["Retry-After"]) <= LOCKOUT_SECONDS - 119
    assert f"try again in {response['Retry-After']} seconds" in response.content.decode()


def _scrape(token: str, address: str):
    return Client(REMOTE_ADDR=address).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_metrics_with_bad_tokens_is_throttled_like_the_api(db):
    _, token = token_create(name="scraper", scope="admin")
    for attempt in range(LIMIT - 1):
        assert _scrape(f"cvy_bad-{attempt}", ATTACKER).status_code == 401
    locked = _scrape("cvy_bad-last", ATTACKER)  # the failure that reaches the limit
    assert locked.status_code == 429
    assert locked["Retry-After"] == str(LOCKOUT_SECONDS)
    assert locked.json()["error"]["code"] == "too_many_requests"
    assert _scrape("cvy_bad-more", ATTACKER).status_code == 429
    # The failures count for the API too, and a valid token still works in both.
    api = Client(REMOTE_ADDR=ATTACKER)
    assert api.get("/api/v1/queue", HTTP_AUTHORIZATION="Bearer cvy_x").status_code == 429
    assert api.get("/api/v1/queue", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    assert _scrape(token, ATTACKER).status_code == 200


def test_the_limits_are_settings():
    assert settings.AXES_FAILURE_LIMIT == settings.CONVEYOR_AUTH_FAILURE_LIMIT == LIMIT
    assert settings.CONVEYOR_AUTH_LOCKOUT.total_seconds() == LOCKOUT_SECONDS
