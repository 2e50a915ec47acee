"""The date filters of the deliveries, deployments and maintenance runs admins: never a 500."""

import pytest
from django.apps import apps
from django.urls import reverse

# Each lookup after the filtered field's name, and what a hostile user sends it.
VALUES = {
    "gte": [
        "9999-12-31 23:59:59-23:59",
        "0001-01-01 00:00:00+23:59",
        "0001-01-01",
        "9999-12-31T23:59:59.999999",
        "2026-13-01",
        "\x00",
        "1" * 400,
    ],
    "lt": ["0001-01-01 00:00:00+14:00", "9999-12-31 23:59:59.999999-12:00"],
    "in": ["2026-01-01,xx", ""],
    "isnull": ["true", "garbage"],
    "isempty": ["1"],
    "exact": ["0001-01-01 00:00:00+01:00"],
    "date__gte": ["2026-01-01"],
    "year": ["2026"],
}


CASES = [(key, value) for key, values in VALUES.items() for value in values]


@pytest.mark.parametrize(("lookup", "value"), CASES)
@pytest.mark.parametrize(
    ("label", "field"),
    [
        ("webhooks.delivery", "created_at"),
        ("deployments.deployment", "created_at"),
        ("jobs.maintenancerun", "finished_at"),
    ],
)
def test_hostile_date_filter_value_is_never_a_500(
    secrets_everywhere, viewer, label, field, lookup, value
):
    viewer.raise_request_exception = False
    model = apps.get_model(label)
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    key = f"{field}__{lookup}"
    response = viewer.get(url, {key: value})
    assert response.status_code < 500, (key, value, response.status_code)
