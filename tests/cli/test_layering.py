"""The library never imports the CLI: the CLI parses and calls, never the other way round."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# kvbench/ and the folders installed as kvbench.strategies, .kernels, .workloads
LIBRARY = ["kvbench", "strategies", "kernels", "workloads"]


def _imports_cli(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == "kvbench.cli" or a.name.startswith("kvbench.cli.")
                   for a in node.names)
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "kvbench.cli" or node.module.startswith("kvbench.cli."):
            return True
        return node.module == "kvbench" and any(a.name == "cli" for a in node.names)
    if isinstance(node, ast.Call) and node.args:  # importlib.import_module("kvbench.cli...")
        first = node.args[0]
        return (isinstance(first, ast.Constant) and isinstance(first.value, str)
                and (first.value == "kvbench.cli" or first.value.startswith("kvbench.cli."))
                and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "import_module", "__import__"))
    return False


def test_no_library_module_imports_kvbench_cli():
    offenders = []
    modules = [p for folder in LIBRARY for p in sorted((ROOT / folder).rglob("*.py"))]
    assert len(modules) > 50  # the scan found the package
    for path in modules:
        if (ROOT / "kvbench" / "cli") in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                      if _imports_cli(node)]
    assert offenders == []


def test_the_scan_sees_every_spelling_of_the_import():
    for source in ("import kvbench.cli", "from kvbench.cli.app import main",
                   "from kvbench import cli", "importlib.import_module('kvbench.cli.run')",
                   "def f():\n    from kvbench.cli import main"):
        assert any(_imports_cli(n) for n in ast.walk(ast.parse(source))), source
    for source in ("import kvbench.client", "from kvbench import config",
                   "from kvbench.bench import session"):
        assert not any(_imports_cli(n) for n in ast.walk(ast.parse(source))), source


# docs/design.md, Package layout: dependencies point one way. Each lower layer may not import
# the layers listed against it (nor the CLI, checked above). The engine loop in core drives the
# seams, so it may import their interfaces (ALLOWED), never an implementation.
ALLOWED = ("kvbench.scheduling.base", "kvbench.scheduling.queue_order",
           "kvbench.execution.executor")
FORBIDDEN = {
    "kvbench/core": ("kvbench.scheduling", "kvbench.execution", "kvbench.models",
                     "kvbench.bench", "kvbench.report", "kvbench.workloads", "kvbench.kernels"),
    "kvbench/scheduling": ("kvbench.execution", "kvbench.models", "kvbench.bench",
                           "kvbench.report", "kvbench.workloads", "kvbench.kernels"),
    "strategies": ("kvbench.scheduling", "kvbench.execution", "kvbench.models", "kvbench.bench",
                   "kvbench.report", "kvbench.workloads", "kvbench.kernels"),
    "kvbench/execution": ("kvbench.bench", "kvbench.report"),
    "kvbench/models": ("kvbench.execution", "kvbench.bench", "kvbench.report"),
    "kernels": ("kvbench.execution", "kvbench.bench", "kvbench.report"),
    "workloads": ("kvbench.execution", "kvbench.bench", "kvbench.report"),
}


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "kvbench":
                found += [(node.lineno, f"kvbench.{a.name}") for a in node.names]
    return found


def test_dependencies_point_one_way():
    offenders = []
    for folder, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            offenders += [f"{path.relative_to(ROOT)}:{line} imports {name}"
                          for line, name in _imported_modules(tree)
                          if name not in ALLOWED
                          and any(name == f or name.startswith(f + ".") for f in forbidden)]
    assert offenders == []
