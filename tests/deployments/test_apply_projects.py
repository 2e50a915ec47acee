"""Projects as code: ``apply_projects`` round trip, idempotence, and whole-file rejection."""

import json
from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from deployments.models import Pipeline, Project
from deployments.services import deployment_create
from tests.deployments.conftest import log_text, wait_for

DOCUMENT = {
    "projects": [
        {
            "slug": "web",
            "name": "Web site",
            "concurrency": "supersede",
            "deployment_timeout": "15m",
            "stop_grace": 5,
            "env": {"LOG_LEVEL": "info", "WORKERS": 4, "DEBUG": False},
            "secrets": {"API_TOKEN": {"from_env": "TEST_WEB_TOKEN"}, "LITERAL": "xyzzy-123"},
            "pipelines": [
                {
                    "name": "default",
                    "steps": [
                        {"name": "build", "command": "make build", "timeout": "10m"},
                        {
                            "name": "smoke",
                            "command": "make smoke",
                            "env": {"RETRIES": "3"},
                            "continue_on_error": True,
                        },
                    ],
                },
                {"name": "rollback", "steps": [{"name": "undo", "command": "make undo"}]},
            ],
        },
        {"slug": "api", "repo": "https://git.example.com/api.git"},
    ]
}


def apply_file(tmp_path, document, name="projects.yaml", *options) -> str:
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(json.dumps(document))
    else:
        path.write_text(yaml.safe_dump(document))
    out = StringIO()
    call_command("apply_projects", str(path), *options, stdout=out)
    return out.getvalue()


@pytest.fixture(autouse=True)
def token(monkeypatch):
    monkeypatch.setenv("TEST_WEB_TOKEN", "from-the-environment")


def test_a_document_round_trips_and_a_second_apply_changes_nothing(db, tmp_path):
    out = apply_file(tmp_path, DOCUMENT)
    assert "project web: created" in out and "pipeline web/rollback: created" in out
    web = Project.objects.get(slug="web")
    assert (web.name, web.concurrency_policy, web.deployment_timeout, web.stop_grace) == (
        "Web site",
        "supersede",
        900,
        5,
    )
    assert web.env == {"LOG_LEVEL": "info", "WORKERS": "4", "DEBUG": "false"}
    assert web.secrets == {"API_TOKEN": "from-the-environment", "LITERAL": "xyzzy-123"}
    assert web.pipelines.get(name="default").snapshot() == [
        {
            "name": "build",
            "command": "make build",
            "timeout": 600,
            "env": {},
            "continue_on_error": False,
        },
        {
            "name": "smoke",
            "command": "make smoke",
            "timeout": None,
            "env": {"RETRIES": "3"},
            "continue_on_error": True,
        },
    ]
    api = Project.objects.get(slug="api")
    assert api.repo == "https://git.example.com/api.git" and api.concurrency_policy == "queue"
    assert not api.pipelines.exists()

    again = apply_file(tmp_path, DOCUMENT, "projects.json")  # the same document as JSON
    assert "0 created, 0 updated, 4 unchanged, 0 deleted" in again


def test_an_edit_updates_only_what_changed_and_prune_removes_the_rest(db, tmp_path):
    apply_file(tmp_path, DOCUMENT)
    step_ids = list(Pipeline.objects.get(name="rollback").steps.values_list("pk", flat=True))
    edited = json.loads(json.dumps(DOCUMENT))
    edited["projects"][0]["pipelines"] = [edited["projects"][0]["pipelines"][0]]
    edited["projects"][0]["pipelines"][0]["steps"][0]["command"] = "make build-v2"
    out = apply_file(tmp_path, edited)
    assert "pipeline web/default: updated" in out
    assert Pipeline.objects.filter(name="rollback").exists()  # kept without --prune
    assert (
        list(Pipeline.objects.get(name="rollback").steps.values_list("pk", flat=True)) == step_ids
    )
    out = apply_file(tmp_path, edited, "projects.yaml", "--prune")
    assert "pipeline web/rollback: deleted" in out
    assert not Pipeline.objects.filter(name="rollback").exists()
    default = Pipeline.objects.get(project__slug="web", name="default")
    assert default.snapshot()[0]["command"] == "make build-v2"


def test_a_bad_file_is_rejected_as_a_whole_naming_each_offending_key(db, tmp_path):
    bad = json.loads(json.dumps(DOCUMENT))
    bad["projects"].insert(
        0,
        {"slug": "fine", "pipelines": [{"name": "p", "steps": [{"name": "s", "command": "true"}]}]},
    )
    web = bad["projects"][1]
    web["concurrency"] = "sometimes"
    web["colour"] = "blue"
    web["pipelines"][0]["steps"][1]["timeout"] = "soon"
    web["pipelines"][1]["steps"] = []
    web["secrets"]["MISSING"] = {"from_env": "TEST_NOT_SET_ANYWHERE"}
    with pytest.raises(CommandError) as raised:
        apply_file(tmp_path, bad)
    message = str(raised.value)
    for expected in (
        "projects[web].concurrency: must be one of queue, supersede, cancel_in_progress",
        "projects[web].colour: unknown key",
        "projects[web].pipelines[default].steps[1].timeout: must be seconds or a duration",
        "projects[web].pipelines[rollback].steps: must be a non-empty list",
        "projects[web].secrets.MISSING.from_env: environment variable 'TEST_NOT_SET_ANYWHERE'",
    ):
        assert expected in message
    assert not Project.objects.exists()  # not even the valid project was written


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("projects: [", "not valid YAML"),
        ("projects:\n  - slug: a\n    slug: b\n", "duplicate key 'slug'"),
        ("- just a list", "(document): must be a mapping"),
        ("projects:\n  - slug: Not A Slug\n", "projects[Not A Slug].slug: required"),
        ("projects:\n  - slug: a\n  - slug: a\n", "projects[a].slug: 'a' is declared twice"),
        ("projects:\n  - slug: a\n    env: {CONVEYOR_X: 1}\n", "projects[a].env.CONVEYOR_X"),
    ],
)
def test_malformed_files_are_rejected_with_their_reason(db, tmp_path, text, expected):
    path = tmp_path / "projects.yaml"
    path.write_text(text)
    with pytest.raises(CommandError) as raised:
        call_command("apply_projects", str(path), stdout=StringIO())
    assert expected in str(raised.value)
    assert not Project.objects.exists()


def test_dry_run_reports_without_writing(db, tmp_path):
    out = apply_file(tmp_path, DOCUMENT, "projects.yaml", "--dry-run")
    assert "project web: created" in out and "dry run" in out
    assert not Project.objects.exists()


def test_seed_demo_is_idempotent_and_its_pipelines_behave(transactional_db, deploy_worker):
    call_command("seed_demo", stdout=StringIO())
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert "0 created, 0 updated, 4 unchanged" in out.getvalue()
    demo = Project.objects.get(slug="demo")
    assert sorted(demo.pipelines.values_list("name", flat=True)) == ["broken", "default", "slow"]
    slow = demo.pipelines.get(name="slow").snapshot()
    assert "seq 1 60" in slow[0]["command"]
    deploy_worker()
    good = wait_for(deployment_create(project="demo", ref="main"), "success", "failed")
    broken = wait_for(
        deployment_create(project="demo", ref="main", pipeline="broken"), "success", "failed"
    )
    assert good.status == "success" and "building part 3" in log_text(good)
    assert broken.status == "failed" and broken.failure_reason == "step_failed"


def test_a_secret_shorter_than_the_minimum_is_refused_without_showing_it(db, tmp_path):
    document = {"projects": [{"slug": "tiny", "secrets": {"PIN": "k9Zq", "OK": "long-enough"}}]}
    with pytest.raises(CommandError) as raised:
        apply_file(tmp_path, document)
    message = str(raised.value)
    assert "projects[tiny].secrets.PIN: a secret needs at least 8 characters (got 4)" in message
    assert "k9Zq" not in message and "OK" not in message.split("PIN", 1)[1]
    assert not Project.objects.exists()


def test_runs_on_is_applied_as_lower_case_tags_and_a_bad_one_is_rejected(db, tmp_path):
    document = {"projects": [{"slug": "ml", "runs_on": ["GPU", "linux", "gpu"]}]}
    apply_file(tmp_path, document)
    assert Project.objects.get(slug="ml").runs_on == ["gpu", "linux"]
    document["projects"][0]["runs_on"] = []
    apply_file(tmp_path, document)
    assert Project.objects.get(slug="ml").runs_on == []
    for bad, expected in (("gpu", "must be a list of tags"), (["a b"], "'a b' is not a tag")):
        document["projects"][0]["runs_on"] = bad
        with pytest.raises(CommandError) as raised:
            apply_file(tmp_path, document)
        assert f"projects[ml].runs_on: {expected}" in str(raised.value)


def test_the_model_refuses_a_runs_on_that_is_not_a_list_of_tags(db):
    from django.core.exceptions import ValidationError

    project = Project(slug="ml", name="ML", runs_on=["gpu", "linux"])
    project.full_clean()
    for bad in ("gpu", ["GPU"], [1], ["a b"]):
        project.runs_on = bad
        with pytest.raises(ValidationError):
            project.full_clean()
