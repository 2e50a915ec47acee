"""The job engine's modules form no import loop, and the engine imports no app that uses it.

project.access (API tokens, idempotency keys, the permission table) sits beside the engine:
only the engine's edges use it, and it uses only the engine's models and maintenance runner.
"""

import ast
from pathlib import Path

from tests.processes import ROOT

JOBS = ROOT / "jobs"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in JOBS.rglob("*.py") if "migrations" not in path.parts}


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if submodule in MODULES else node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_two_modules_of_the_engine_import_each_other():
    graph = {name: imported(path) & MODULES.keys() - {name} for name, path in MODULES.items()}
    assert len(graph) > 40  # the walk found the engine
    loops = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph[b]})
    assert loops == []


def test_the_engine_imports_no_app_built_on_it():
    apps = ("webhooks", "deployments")
    found = sorted(
        f"{name} imports {other}"
        for name, path in MODULES.items()
        for other in imported(path)
        if other.split(".")[0] in apps
    )
    assert found == []


# Its edges authenticate API tokens and check the permission table through project.access;
# nothing else of the engine knows about tokens or permissions.
ACCESS_USERS = {
    "jobs.api",
    "jobs.admin",
    "jobs.admin_bulk",
    "jobs.bulk",
    "jobs.workflows.api",
    "jobs.workflows.admin",
}


def test_only_the_engines_edges_use_project_access():
    found = {
        name
        for name, path in MODULES.items()
        for other in imported(path)
        if other == "project.access" or other.startswith("project.access.")
    }
    assert found, "the walk found no use of project.access"
    assert found <= ACCESS_USERS, sorted(found - ACCESS_USERS)


def test_project_access_needs_only_the_engines_models_and_runner():
    access = ROOT / "project" / "access"
    found = sorted(
        f"{module_name(path)} imports {other}"
        for path in access.rglob("*.py")
        if "migrations" not in path.parts
        for other in imported(path)
        if other.split(".")[0] in ("jobs", "webhooks", "deployments")
        and other not in ("jobs.models", "jobs.maintenance.runs")
    )
    assert found == []
