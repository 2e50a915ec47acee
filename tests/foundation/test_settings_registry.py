"""Every CONVEYOR_* setting is declared once, and the docs and the code agree with it."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from project import settings_registry
from project.settings_registry import SETTINGS
from tests.processes import ROOT

# A row of a table in docs/configuration.md: | `CONVEYOR_NAME` | default | meaning |
DOC_ROW = re.compile(r"^\| `(CONVEYOR_[A-Z_]+)` \| ([^|]*) \|", re.M)
TYPES = {
    "duration": timedelta,
    "integer": int,
    "boolean": bool,
    "string": str,
    "choice": str,
    "counts": dict,
    "path": Path,
    "networks": str,
}


def documented() -> dict[str, str]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    rows = DOC_ROW.findall(text)
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), "a setting is documented twice"
    return {name: default.strip().replace("`", "") for name, default in rows}


def test_the_docs_list_exactly_the_declared_settings_with_their_defaults():
    docs = documented()
    assert sorted(docs) == sorted(settings_registry.NAMES)
    for setting in SETTINGS:
        shown = docs[setting.name]
        expected = setting.documented_default
        if expected == "":
            assert shown in ("none", "empty"), (setting.name, shown)
        else:
            assert shown == expected, (setting.name, shown, expected)


def test_every_declared_setting_is_a_django_setting_of_its_type():
    for setting in SETTINGS:
        value = getattr(settings, setting.name)
        assert isinstance(value, TYPES[setting.kind]), (setting.name, value)
        assert setting.why, setting.name


def test_defaults_follow_the_settings_they_depend_on(monkeypatch):
    for name in settings_registry.NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONVEYOR_WEBHOOK_CONCURRENCY", "10")
    monkeypatch.setenv("CONVEYOR_VAR_DIR", "/srv/conveyor")
    values = settings_registry.load(ROOT)
    assert values["CONVEYOR_WEBHOOK_ENDPOINT_CONCURRENCY"] == 5
    assert values["CONVEYOR_WORKSPACES_DIR"] == Path("/srv/conveyor/workspaces")
    assert values["CONVEYOR_RETRY_BACKOFF_MAX"] == timedelta(minutes=15)
    monkeypatch.delenv("CONVEYOR_VAR_DIR")
    assert settings_registry.load(ROOT)["CONVEYOR_VAR_DIR"] == ROOT / "var"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CONVEYOR_RETRY_BACKOFF_MAX", "soon", "is not a duration"),
        ("CONVEYOR_BATCH_SIZE", "501", "above the maximum of 500"),
        ("CONVEYOR_HTTPS", "maybe", "is not a boolean"),
        ("CONVEYOR_LOG_LEVEL", "loud", "is not one of"),
        ("CONVEYOR_QUEUE_CONCURRENCY", "default", "is not name=N"),
        ("CONVEYOR_METRICS_ALLOW", "127.0.0.1,abc", "'abc' is not an IP address or network"),
        ("CONVEYOR_METRICS_ALLOW", "10.0.0.0/33", "is not an IP address or network"),
    ],
)
def test_a_bad_value_names_its_variable(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=rf"^{name}: .*{message}"):
        settings_registry.load(ROOT)


def test_unknown_variables_are_those_declared_nowhere():
    environ = {"CONVEYOR_HTTPS": "1", "CONVEYOR_HTTP": "1", "PATH": "/bin"}
    assert settings_registry.unknown_variables(environ) == ["CONVEYOR_HTTP"]


def test_no_module_reads_a_conveyor_variable_but_the_registry():
    """A CONVEYOR_* setting is read from the environment in one place only."""
    kinds = "duration|integer|boolean|string|choice|counts_by_name|networks"
    readers = rf"os\.environ|os\.getenv|env\.({kinds})"
    reader = re.compile(rf"""({readers})\s*[\[(.]\s*(get\()?\s*["']CONVEYOR_""")
    found = []
    for package in ("jobs", "webhooks", "deployments", "project"):
        for path in (ROOT / package).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if reader.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_the_retry_ceiling_is_a_setting_read_when_a_retry_is_decided(settings):
    from jobs import outcome
    from jobs.models import Job
    from jobs.task import JobTask

    class Backoff(JobTask):  # no cap of its own, no jitter: the delay is the ceiling
        name = "tests.registry_backoff"
        retry_jitter = False

    late = Job(attempts=30)
    settings.CONVEYOR_RETRY_BACKOFF_MAX = timedelta(minutes=5)
    assert outcome._delay(RuntimeError("x"), late, Backoff()) == timedelta(minutes=5)
    settings.CONVEYOR_RETRY_BACKOFF_MAX = timedelta(minutes=2)
    assert outcome._delay(RuntimeError("x"), late, Backoff()) == timedelta(minutes=2)
