"""Hostile input to the console answers a clean refusal, never a 500 (walked over every admin).

Every registered admin (Conveyor's and the third-party ones) is walked as view-only staff
with what a hostile user types into a URL: a NUL byte in a filter, a search, an
autocomplete term or a path (PostgreSQL refuses NUL in text, so it must not reach a query),
an object id that is not one, and a date-hierarchy year beyond what a date can hold.
"""

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import NoReverseMatch, reverse

pytestmark = pytest.mark.django_db


def _changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def _filter_parameters(model_admin) -> list[str]:
    names = []
    for item in model_admin.list_filter or ():
        if isinstance(item, str):
            names.append(f"{item}__exact")
        elif isinstance(item, (list, tuple)):
            names.append(f"{item[0]}__exact")
        elif getattr(item, "parameter_name", None):
            names.append(item.parameter_name)
    return names


def _no_500(client: Client, url: str, params=None) -> int:
    response = client.get(url, params or {})
    assert response.status_code < 500, (url, params)
    return response.status_code


def test_a_nul_byte_in_a_filter_search_or_autocomplete_answers_400(secrets_everywhere, viewer):
    viewer.raise_request_exception = False
    refused = 0
    for model, model_admin in admin.site._registry.items():
        url = _changelist(model)
        for name in _filter_parameters(model_admin):
            assert _no_500(viewer, url, {name: "dead\x00"}) == 400, (url, name)
            refused += 1
        assert _no_500(viewer, url, {"q": "x\x00y"}) == 400
        for field in model._meta.get_fields():
            if field.is_relation and field.concrete and field.related_model in admin.site._registry:
                params = {
                    "app_label": model._meta.app_label,
                    "model_name": model._meta.model_name,
                    "field_name": field.name,
                    "term": "a\x00",
                }
                _no_500(viewer, reverse("admin:autocomplete"), params)
    assert refused > 20  # the walk did reach the filters it is about


def test_a_malformed_object_id_on_any_admin_page_is_not_a_500(secrets_everywhere, viewer):
    viewer.raise_request_exception = False
    for model in admin.site._registry:
        for suffix in ("change", "history", "delete"):
            for object_id in ("abc", "1.5", "99999999999999999999", "%00"):
                try:
                    url = reverse(
                        f"admin:{model._meta.app_label}_{model._meta.model_name}_{suffix}",
                        args=[object_id],
                    )
                except NoReverseMatch:
                    continue
                assert _no_500(viewer, url) in (302, 400, 403, 404), url


def test_no_admin_of_conveyor_has_a_date_hierarchy():
    # Its month list sorts the whole table; a date range filter is what Conveyor's admins offer.
    walked = 0
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label in ("jobs", "access", "webhooks", "deployments"):
            assert not model_admin.date_hierarchy, model._meta.label
            walked += 1
    assert walked >= 10


def test_a_date_hierarchy_year_out_of_range_is_refused_not_a_500(secrets_everywhere, viewer):
    viewer.raise_request_exception = False
    walked = 0
    for model, model_admin in admin.site._registry.items():
        if not model_admin.date_hierarchy:
            continue
        key = f"{model_admin.date_hierarchy}__"
        for params in (
            {f"{key}year": "99999999999"},
            {f"{key}year": "9999"},
            {f"{key}year": "9999", f"{key}month": "12"},
            {f"{key}year": "9999", f"{key}month": "12", f"{key}day": "31"},
        ):
            response = viewer.get(_changelist(model), params)
            assert response.status_code == 302, (model._meta.label, params)
            assert response["Location"].endswith("?e=1")
            walked += 1
    assert walked >= 4  # the third-party admins' (beat, results, axes); see the next test


@pytest.mark.parametrize(
    "label, field",
    [
        ("webhooks.delivery", "created_at"),
        ("deployments.deployment", "created_at"),
        ("jobs.maintenancerun", "finished_at"),
    ],
)
def test_the_date_filter_that_replaced_the_hierarchy_is_allowed_and_bad_dates_are_refused(
    secrets_everywhere, viewer, label, field
):
    from django.apps import apps

    viewer.raise_request_exception = False
    url = _changelist(apps.get_model(label))
    since = {
        f"{field}__gte": "2026-01-01 00:00:00+00:00",
        f"{field}__lt": "2100-01-01 00:00:00+00:00",
    }
    assert viewer.get(url, since).status_code == 200
    assert _no_500(viewer, url + f"?{field}__gte=99999-99-99") in (302, 400)
