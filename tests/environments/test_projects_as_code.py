"""Projects as code: an ``environments`` list sets approvals, wait timer and freezes."""

import pytest

from deployments.models import Environment, Project
from deployments.projects_as_code.apply import apply_document
from deployments.projects_as_code.schema import InvalidDocument

DOCUMENT = {
    "projects": [
        {
            "slug": "web",
            "environments": [
                {
                    "name": "production",
                    "protected": True,
                    "required_approvals": 2,
                    "approvers": {"users": ["bob", "alice"], "groups": ["releasers"]},
                    "wait_timer": "10m",
                    "freeze": [
                        {
                            "name": "weekend",
                            "cron": "0 18 * * fri",
                            "duration": "62h",
                            "timezone": "Europe/Paris",
                        },
                        {"name": "year-end", "start": "2026-12-20 00:00", "end": "2027-01-04"},
                    ],
                },
                {"name": "staging", "protected": True},
                {"name": "dev"},
            ],
        }
    ]
}


def test_environments_are_applied_idempotently_and_pruned(db):
    result = apply_document(DOCUMENT)
    assert "environment web/production: created" in result.lines
    production = Environment.objects.get(project__slug="web", name="production")
    assert production.needs_approval and production.required_approvals == 2
    assert production.approver_users == ["alice", "bob"]
    assert production.approver_groups == ["releasers"] and production.wait_timer == 600
    assert [w["name"] for w in production.freeze] == ["weekend", "year-end"]
    assert production.freeze[0]["duration"] == 62 * 3600
    assert production.freeze[1]["end"] == "2027-01-04T00:00:00"
    staging = Environment.objects.get(project__slug="web", name="staging")
    assert staging.required_approvals == 1  # protected alone means one approval
    dev = Environment.objects.get(project__slug="web", name="dev")
    assert not dev.needs_approval and dev.freeze == []

    again = apply_document(DOCUMENT)
    assert again.created == again.updated == 0

    fewer = {"projects": [{"slug": "web", "environments": [{"name": "dev"}]}]}
    kept = apply_document(fewer)
    assert Environment.objects.count() == 3 and kept.deleted == 0
    pruned = apply_document(fewer, prune=True)
    assert pruned.deleted == 2 and list(Environment.objects.values_list("name", flat=True)) == [
        "dev"
    ]
    # A document without the key leaves the rules alone.
    apply_document({"projects": [{"slug": "web"}]}, prune=True)
    assert Environment.objects.filter(name="dev").exists()


@pytest.mark.parametrize(
    ("environment", "error"),
    [
        ({"name": "p", "required_approvals": 2}, "only with protected: true"),
        ({"name": "p", "protected": True, "required_approvals": 11}, "between 1 and 10"),
        ({"name": "p", "protected": "yes"}, "protected: must be true or false"),
        ({"name": "p", "approvers": {"people": ["a"]}}, "approvers.people: unknown key"),
        ({"name": "p", "approvers": {"users": "alice"}}, "approvers.users: must be a list"),
        ({"name": "p", "wait_timer": "forever"}, "wait_timer: must be seconds"),
        ({"name": "p", "freeze": [{"name": "x", "cron": "0 0 * *"}]}, "freeze[0].cron"),
        ({"name": "p", "colour": "red"}, "colour: unknown key"),
        ({"name": "no spaces"}, ".name: required"),
    ],
)
def test_bad_environments_are_refused_with_their_key_path(db, environment, error):
    document = {"projects": [{"slug": "web", "environments": [environment]}]}
    with pytest.raises(InvalidDocument) as refused:
        apply_document(document)
    assert any(
        error in line and "projects[web].environments" in line for line in refused.value.errors
    )
    assert not Project.objects.exists()
