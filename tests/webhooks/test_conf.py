"""The webhooks settings fail loudly when they cannot work."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from webhooks import conf


def test_defaults_are_the_documented_ones():
    settings = conf.get()
    assert (settings.enabled, settings.timeout, settings.max_attempts) == (True, 10.0, 6)
    assert (settings.disable_after, settings.allow_private) == (10, False)
    assert settings.allowed_networks == ()
    assert (settings.backoff, settings.backoff_max, settings.retry_after_max) == (30, 900, 900)
    assert settings.retention == timedelta(days=30)


def test_allowed_networks_parse_and_a_bad_one_is_refused():
    assert [str(n) for n in conf.parse_networks(" 10.0.0.0/8, ,fd00::/8 ")] == [
        "10.0.0.0/8",
        "fd00::/8",
    ]
    with pytest.raises(ImproperlyConfigured, match="ALLOWED_NETWORKS"):
        conf.parse_networks("10.0.0.0/8,not-a-network")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONVEYOR_WEBHOOK_BACKOFF_MAX", timedelta(seconds=901)),
        ("CONVEYOR_WEBHOOK_RETRY_AFTER_MAX", timedelta(hours=1)),
        ("CONVEYOR_WEBHOOK_BACKOFF", timedelta(seconds=0.5)),
        ("CONVEYOR_WEBHOOK_TIMEOUT", timedelta(0)),
        ("CONVEYOR_WEBHOOK_RETENTION", timedelta(minutes=59)),
    ],
)
def test_values_that_cannot_work_are_refused_at_start_up(settings, name, value):
    conf.validate()
    setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        conf.validate()
