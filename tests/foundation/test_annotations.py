"""The core's public functions are fully annotated: each parameter (but self/cls), the return."""

import ast

from tests.processes import ROOT

CORE = [
    *sorted((ROOT / "jobs" / "services").glob("*.py")),
    *(
        ROOT / name
        for name in (
            "jobs/outcome.py",
            "jobs/completer.py",
            "jobs/publish.py",
            "jobs/lease.py",
            "jobs/limits.py",
            "jobs/unique.py",
            "jobs/conf.py",
            "webhooks/services.py",
            "deployments/services.py",
            "deployments/creation.py",
            "deployments/lifecycle.py",
        )
    ),
]


def public_functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            yield node.name, node, False
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and (
                    not item.name.startswith("_") or item.name == "__init__"
                ):
                    yield f"{node.name}.{item.name}", item, True


def gaps(fn: ast.FunctionDef, method: bool) -> list[str]:
    a = fn.args
    params = a.posonlyargs + a.args + a.kwonlyargs
    if method and params and params[0].arg in ("self", "cls"):
        params = params[1:]
    found = [p.arg for p in params if p.annotation is None]
    found += [f"*{x.arg}" for x in (a.vararg, a.kwarg) if x is not None and x.annotation is None]
    return found + (["return"] if fn.returns is None else [])


def test_every_public_function_of_the_core_is_fully_annotated():
    checked, missing = 0, []
    for path in CORE:
        for name, fn, method in public_functions(ast.parse(path.read_text())):
            checked += 1
            if found := gaps(fn, method):
                missing.append(f"{path.relative_to(ROOT)}:{fn.lineno} {name}: {found}")
    assert checked > 80  # the walk found the core
    assert missing == []


def test_the_check_sees_a_missing_annotation():
    tree = ast.parse("def f(a, *, b: int) -> None: ...\nclass C:\n    def m(self, x: int): ...")
    assert [(name, gaps(fn, method)) for name, fn, method in public_functions(tree)] == [
        ("f", ["a"]),
        ("C.m", ["return"]),
    ]
