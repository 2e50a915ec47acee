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


def test_the_deliver_task_reads_the_settings_in_force(settings):
    """Nothing of the deliver task is fixed at import: a change of settings is what it uses."""
    from jobs.limits import limit_of
    from webhooks.tasks import deliver

    settings.CONVEYOR_WEBHOOK_MAX_ATTEMPTS = 3
    settings.CONVEYOR_WEBHOOK_TIMEOUT = timedelta(seconds=20)
    settings.CONVEYOR_WEBHOOK_BACKOFF = timedelta(seconds=7)
    settings.CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY = 2
    settings.CONVEYOR_WEBHOOK_ENDPOINT_RATE = "4/m"
    assert (deliver.job_max_attempts, deliver.retry_backoff) == (3, 7)
    assert (deliver.soft_time_limit, deliver.time_limit) == (75, 90)
    limit = limit_of(deliver)
    assert (limit.key, limit.key_concurrency, limit.key_rate) == (("endpoint_id",), 2, "4/m")
    settings.CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY = 5
    assert limit_of(deliver).key_concurrency == 5
