"""/healthz: 200 when the database and the broker answer, 503 naming what failed."""

import pytest
from django.test import Client
from kombu import Connection

from project.celery import app

pytestmark = pytest.mark.django_db

# Nothing listens on port 1: connecting is refused at once.
UNREACHABLE = "redis://127.0.0.1:1/0"


def test_both_answer():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"database": "ok", "broker": "ok"}


def test_a_broker_that_is_away_is_a_503_that_names_it(monkeypatch):
    monkeypatch.setattr(app, "connection_for_write", lambda: Connection(UNREACHABLE))
    response = Client().get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"database": "ok", "broker": "error: OperationalError"}


def test_a_bug_in_the_check_is_not_reported_as_the_broker_being_away(monkeypatch):
    def broken():
        raise RuntimeError("a bug, not a broker")

    monkeypatch.setattr(app, "connection_for_write", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        Client(raise_request_exception=True).get("/healthz")
