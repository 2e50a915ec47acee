"""The created_at date filters of the deliveries and deployments admins: no value is a 500."""

import pytest
from django.apps import apps
from django.urls import reverse

from tests.security.test_admin_lookups import secrets_everywhere, viewer  # noqa: F401

VALUES = {
    "created_at__gte": [
        "9999-12-31 23:59:59-23:59",
        "0001-01-01 00:00:00+23:59",
        "0001-01-01",
        "9999-12-31T23:59:59.999999",
        "2026-13-01",
        "\x00",
        "1" * 400,
    ],
    "created_at__lt": ["0001-01-01 00:00:00+14:00", "9999-12-31 23:59:59.999999-12:00"],
    "created_at__in": ["2026-01-01,xx", ""],
    "created_at__isnull": ["true", "garbage"],
    "created_at__isempty": ["1"],
    "created_at__exact": ["0001-01-01 00:00:00+01:00"],
    "created_at__date__gte": ["2026-01-01"],
    "created_at__year": ["2026"],
}


CASES = [(key, value) for key, values in VALUES.items() for value in values]


@pytest.mark.parametrize(("key", "value"), CASES)
@pytest.mark.parametrize("label", ["webhooks.delivery", "deployments.deployment"])
def test_hostile_date_filter_value_is_never_a_500(secrets_everywhere, viewer, label, key, value):  # noqa: F811
    viewer.raise_request_exception = False
    model = apps.get_model(label)
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    response = viewer.get(url, {key: value})
    assert response.status_code < 500, (key, value, response.status_code)
