"""The dashboard's broker depths: read from the broker, or shown unavailable with why."""

import logging
import uuid

import pytest

from project import dashboard
from project.celery import app

pytestmark = pytest.mark.django_db

# Nothing listens on port 1: connecting is refused at once.
UNREACHABLE = "redis://127.0.0.1:1/0"


def test_a_broker_that_answers_gives_each_queue_its_depth():
    unused = f"never-used-{uuid.uuid4().hex}"
    depths = dashboard.broker_depths(["celery", unused])
    assert depths.unavailable == {}
    assert depths.depths[unused] == 0
    assert isinstance(depths.depths["celery"], int)


def test_a_broker_that_is_away_makes_the_depth_unavailable_with_why(
    monkeypatch, caplog, admin_client
):
    monkeypatch.setattr(app, "connection_for_read", lambda: app.connection(UNREACHABLE))
    with caplog.at_level(logging.WARNING, logger="project.dashboard"):
        depths = dashboard.broker_depths(["celery", "deploys"])
    assert depths.depths == {}
    assert set(depths.unavailable) == {"celery", "deploys"}
    assert all("Error" in why for why in depths.unavailable.values()), depths.unavailable
    assert [r.msg for r in caplog.records] == ["dashboard.broker_failed"]

    page = admin_client.get("/admin/dashboard/").content.decode()
    assert 'data-stat="broker_depth_unavailable"' in page
    assert "unavailable: " in page


def test_an_error_that_is_not_the_brokers_propagates(monkeypatch):
    def broken():
        raise RuntimeError("a bug, not a broker")

    monkeypatch.setattr(app, "connection_for_read", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        dashboard.broker_depths(["celery"])
