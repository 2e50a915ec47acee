"""Read and validate a projects document into specs; every error names its key.

The document::

    projects:
      - slug: web                       # required
        name: Web site
        repo: https://git.example.com/web.git   # or a local path; omit to run in workdir
        workdir: /srv/web               # absolute; only without repo
        default_environment: production   # environment names are folded to lower case
        strict_environments: true       # deploy only to the environments declared below
        runs_on: [linux, gpu]           # only on a live deployer host having every tag
        default_pipeline: default
        concurrency: queue              # queue | supersede | cancel_in_progress
        deployment_timeout: 1h          # seconds or 30s, 5m, 1h, 1d
        stop_grace: 10s
        env: {LOG_LEVEL: info}
        secrets: {API_TOKEN: {from_env: WEB_API_TOKEN}}   # or a literal string
        environments:                   # approvals, wait timer, freezes: see
          - name: production            # projects_as_code.environments
            protected: true
            required_approvals: 1
            refs: [main, "release/*"]   # only these refs may deploy here
        pipelines:                      # omitted: the project's pipelines are left alone
          - name: default
            description: Build and ship
            steps:
              - name: build
                command: make build
                timeout: 10m
                env: {}
                continue_on_error: false
"""

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from deployments.models import ConcurrencyPolicy
from deployments.models.projects import TAG_PATTERN
from deployments.projects_as_code.environments import EnvironmentSpec, parse_environments
from deployments.runner.masking import MIN_SECRET_LENGTH
from deployments.validation import NAME, clean_environment, matches
from project import env as process_env
from project.env import parse_duration

SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
PROJECT_KEYS = {
    "slug", "name", "repo", "workdir", "default_environment", "default_pipeline",
    "concurrency", "deployment_timeout", "stop_grace", "env", "secrets", "pipelines",
    "environments", "strict_environments", "runs_on",
}  # fmt: skip
TAG = TAG_PATTERN
PIPELINE_KEYS = {"name", "description", "steps"}
STEP_KEYS = {"name", "command", "timeout", "env", "continue_on_error"}
MAX_STEPS = 100


class InvalidDocument(Exception):
    """The document has errors; ``errors`` lists them, each starting with its key path."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass
class StepSpec:
    name: str
    command: str
    timeout: int | None = None
    env: dict = field(default_factory=dict)
    continue_on_error: bool = False


@dataclass
class PipelineSpec:
    name: str
    description: str = ""
    steps: list[StepSpec] = field(default_factory=list)


@dataclass
class ProjectSpec:
    slug: str
    fields: dict
    pipelines: list[PipelineSpec] | None  # None: leave the project's pipelines alone
    environments: list[EnvironmentSpec] | None = None  # None: leave the rules alone


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping with the same key twice."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def load(path: str | Path) -> object:
    """Read a YAML or JSON file (chosen by its extension; YAML otherwise)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidDocument([f"{path}: cannot read it ({exc.strerror})"]) from None
    except UnicodeDecodeError:
        raise InvalidDocument([f"{path}: is not UTF-8 text"]) from None
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except (ValueError, TypeError, yaml.YAMLError) as exc:  # TypeError: a list as a YAML key
        kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
        raise InvalidDocument([f"{path}: not valid {kind}: {exc}"]) from None


def parse(document: object) -> list[ProjectSpec]:
    """Validate ``document``; return its project specs or raise InvalidDocument (all errors)."""
    errors: list[str] = []
    if not isinstance(document, dict):
        raise InvalidDocument(["(document): must be a mapping with a 'projects' list"])
    _unknown(document, {"projects"}, "", errors)
    projects = document.get("projects")
    if not isinstance(projects, list):
        raise InvalidDocument([*errors, "projects: must be a list of projects"])
    specs, slugs = [], set()
    for index, raw in enumerate(projects):
        spec = _project(raw, index, errors)
        if spec is None:
            continue
        if spec.slug in slugs:
            errors.append(f"projects[{spec.slug}].slug: {spec.slug!r} is declared twice")
        slugs.add(spec.slug)
        specs.append(spec)
    if errors:
        raise InvalidDocument(errors)
    return specs


def _unknown(raw: dict, allowed: set[str], where: str, errors: list[str]) -> None:
    for key in raw:
        if key not in allowed:
            path = f"{where}.{key}" if where else str(key)
            errors.append(f"{path}: unknown key (allowed: {', '.join(sorted(allowed))})")


def _project(raw: object, index: int, errors: list[str]) -> ProjectSpec | None:
    if not isinstance(raw, dict):
        errors.append(f"projects[{index}]: must be a mapping")
        return None
    slug = raw.get("slug")
    where = f"projects[{slug if isinstance(slug, str) and slug else index}]"
    _unknown(raw, PROJECT_KEYS, where, errors)
    if not matches(SLUG, slug):
        errors.append(f"{where}.slug: required; lowercase letters, digits, '-' and '_' (max 64)")
        return None
    repo, workdir = _text(raw, "repo", where, errors), _text(raw, "workdir", where, errors)
    if repo and workdir:
        errors.append(f"{where}.workdir: only used without repo; remove one of them")
    if workdir and not os.path.isabs(workdir):
        errors.append(f"{where}.workdir: must be an absolute path")
    concurrency = raw.get("concurrency", ConcurrencyPolicy.QUEUE)
    if concurrency not in ConcurrencyPolicy.values:
        errors.append(f"{where}.concurrency: must be one of {', '.join(ConcurrencyPolicy.values)}")
    fields = {
        "name": _text(raw, "name", where, errors) or slug,
        "repo": repo,
        "workdir": workdir,
        "default_environment": clean_environment(
            _name(raw, "default_environment", "production", where, errors)
        ),
        "strict_environments": _flag(raw, "strict_environments", where, errors),
        "runs_on": _tags(raw.get("runs_on"), f"{where}.runs_on", errors),
        "default_pipeline": _name(raw, "default_pipeline", "default", where, errors),
        "concurrency_policy": concurrency,
        # None: CONVEYOR_DEPLOYMENT_TIMEOUT, filled in when the document is applied.
        "deployment_timeout": _seconds(raw, "deployment_timeout", where, errors, minimum=1),
        "stop_grace": _seconds(raw, "stop_grace", where, errors, minimum=0, maximum=3600),
        "env": _env(raw.get("env"), f"{where}.env", errors),
        "secrets": _secrets(raw.get("secrets"), f"{where}.secrets", errors),
    }
    pipelines = None
    if "pipelines" in raw:
        pipelines = _pipelines(raw["pipelines"], f"{where}.pipelines", errors)
        names = {p.name for p in pipelines}
        if "default_pipeline" in raw and fields["default_pipeline"] not in names:
            errors.append(
                f"{where}.default_pipeline: {fields['default_pipeline']!r} "
                "is not one of the pipelines declared"
            )
    environments = None
    if "environments" in raw:
        environments = parse_environments(
            raw["environments"], f"{where}.environments", errors, _seconds
        )
    if fields["strict_environments"]:
        declared = [spec.name for spec in environments or []]
        if fields["default_environment"] not in declared:
            errors.append(
                f"{where}.default_environment: {fields['default_environment']!r} is not one "
                f"of the environments declared (strict_environments: {', '.join(declared)})"
            )
    return ProjectSpec(slug=slug, fields=fields, pipelines=pipelines, environments=environments)


def _text(raw: dict, key: str, where: str, errors: list[str]) -> str:
    value = raw.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.append(f"{where}.{key}: must be a string")
        return ""
    return value.strip()


def _tags(raw: object, where: str, errors: list[str]) -> list[str]:
    """A list of deployer tags (folded to lower case, sorted, unique); omitted: none."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.append(f"{where}: must be a list of tags, e.g. [linux, gpu]")
        return []
    tags = set()
    for tag in raw:
        if not isinstance(tag, str) or not matches(TAG, tag.lower()):
            errors.append(f"{where}: {tag!r} is not a tag (letters, digits, '.', '_', '-')")
        else:
            tags.add(tag.lower())
    return sorted(tags)


def _flag(raw: dict, key: str, where: str, errors: list[str]) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        errors.append(f"{where}.{key}: must be true or false")
        return False
    return value


def _name(raw: dict, key: str, default: str, where: str, errors: list[str]) -> str:
    value = raw.get(key, default)
    if not matches(NAME, value):
        errors.append(f"{where}.{key}: 1-64 letters, digits, '.', '_' or '-'")
        return default
    return value


def _seconds(
    raw: dict, key: str, where: str, errors: list[str], *, minimum: int, maximum: int | None = None
) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise ValueError("not a duration")
        seconds = int(parse_duration(str(value)).total_seconds())
    except ValueError:
        errors.append(f"{where}.{key}: must be seconds or a duration like 30s, 5m, 1h, 1d")
        return None
    if seconds < minimum or (maximum is not None and seconds > maximum):
        bound = (
            f"between {minimum}s and {maximum}s" if maximum is not None else f"at least {minimum}s"
        )
        errors.append(f"{where}.{key}: must be {bound}")
        return None
    return seconds


def _env(raw: object, where: str, errors: list[str]) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append(f"{where}: must be a mapping of NAME: value")
        return {}
    env = {}
    for name, value in raw.items():
        if not matches(ENV_NAME, name):
            errors.append(f"{where}.{name}: not a valid variable name")
        elif name.startswith("CONVEYOR"):
            errors.append(f"{where}.{name}: CONVEYOR* names are reserved for the runner")
        elif not isinstance(value, str | int | float | bool):
            errors.append(f"{where}.{name}: must be a string, number or boolean")
        else:
            env[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def _secrets(raw: object, where: str, errors: list[str]) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append(f"{where}: must be a mapping of NAME: value or NAME: {{from_env: VAR}}")
        return {}
    secrets = {}
    for name, value in raw.items():
        if isinstance(value, dict) and set(value) == {"from_env"}:
            source = value["from_env"]
            found = process_env.variable(source) if isinstance(source, str) else None
            if found is None:
                errors.append(
                    f"{where}.{name}.from_env: environment variable {source!r} is not set"
                )
                continue
            value = found
        if not isinstance(value, str) or not value:
            errors.append(f"{where}.{name}: must be a non-empty string or {{from_env: VAR}}")
            continue
        if len(value) < MIN_SECRET_LENGTH:  # the value itself is never part of the message
            errors.append(
                f"{where}.{name}: a secret needs at least {MIN_SECRET_LENGTH} characters "
                f"(got {len(value)}): shorter values cannot be masked in every form in logs"
            )
            continue
        checked = _env({name: value}, where, errors)
        secrets.update(checked)
    return secrets


def _pipelines(raw: object, where: str, errors: list[str]) -> list[PipelineSpec]:
    if not isinstance(raw, list):
        errors.append(f"{where}: must be a list of pipelines")
        return []
    specs, names = [], set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            errors.append(f"{where}[{index}]: must be a mapping")
            continue
        name = item.get("name")
        here = f"{where}[{name if isinstance(name, str) and name else index}]"
        _unknown(item, PIPELINE_KEYS, here, errors)
        if not matches(NAME, name):
            errors.append(f"{here}.name: required; 1-64 letters, digits, '.', '_' or '-'")
            continue
        if name in names:
            errors.append(f"{here}.name: {name!r} is declared twice")
        names.add(name)
        specs.append(
            PipelineSpec(
                name=name,
                description=_text(item, "description", here, errors),
                steps=_steps(item.get("steps"), f"{here}.steps", errors),
            )
        )
    return specs


def _steps(raw: object, where: str, errors: list[str]) -> list[StepSpec]:
    if not isinstance(raw, list) or not raw:
        errors.append(f"{where}: must be a non-empty list of steps")
        return []
    if len(raw) > MAX_STEPS:
        errors.append(f"{where}: at most {MAX_STEPS} steps")
    steps = []
    for index, item in enumerate(raw):
        here = f"{where}[{index}]"
        if not isinstance(item, dict):
            errors.append(f"{here}: must be a mapping with name and command")
            continue
        _unknown(item, STEP_KEYS, here, errors)
        name, command = item.get("name"), item.get("command")
        if not isinstance(name, str) or not name.strip() or len(name) > 100:
            errors.append(f"{here}.name: required, at most 100 characters")
        if not isinstance(command, str) or not command.strip():
            errors.append(f"{here}.command: required, a shell command")
        continue_on_error = item.get("continue_on_error", False)
        if not isinstance(continue_on_error, bool):
            errors.append(f"{here}.continue_on_error: must be true or false")
        steps.append(
            StepSpec(
                name=str(name or "").strip(),
                command=str(command or ""),
                timeout=_seconds(item, "timeout", here, errors, minimum=1),
                env=_env(item.get("env"), f"{here}.env", errors),
                continue_on_error=continue_on_error is True,
            )
        )
    return steps
