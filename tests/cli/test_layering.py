"""docs/design.md, Package layout: the library never imports the CLI, and the packages form
layers whose imports point one way: down, never up, never in a circle.

Every import counts: module level, inside a function, under `TYPE_CHECKING`, and
`importlib.import_module("kvbench....")` with a literal name.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# kvbench/ and the folders installed as kvbench.strategies, .kernels, .workloads
LIBRARY = ["kvbench", "strategies", "kernels", "workloads"]
INSTALLED_AS = {"strategies": "kvbench.strategies", "kernels": "kvbench.kernels",
                "workloads": "kvbench.workloads"}

# Bottom to top. A package may import its own layer's modules and any lower layer's; packages
# of one layer do not import each other. Single modules of kvbench/ (errors, units, ...) are
# nodes of their own.
LAYERS: list[tuple[str, ...]] = [
    ("kvbench.errors", "kvbench.versions"),
    ("kvbench.units", "kvbench.registry", "kvbench.tracing"),
    ("kvbench.core",),
    ("kvbench.config", "kvbench.kernels", "kvbench.workloads", "kvbench.strategies"),
    ("kvbench.models", "kvbench.scheduling"),
    ("kvbench.engine", "kvbench.simulator"),
    ("kvbench.execution", "kvbench.sizing"),
    ("kvbench.build",),
    ("kvbench.api", "kvbench.results"),
    ("kvbench.report",),
    ("kvbench.session",),
    ("kvbench.sweep",),
    ("kvbench.cli",),
]
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in INSTALLED_AS:
        parts = INSTALLED_AS[parts[0]].split(".") + parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def node_of(module: str) -> str | None:
    """The layering node a module belongs to (None: the package root `kvbench` itself)."""
    parts = module.split(".")
    if parts[0] != "kvbench" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "kvbench":
                found += [(node.lineno, f"kvbench.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and node.args
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                  "import_module", "__import__")
              and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def library_modules() -> list[Path]:
    modules = [p for folder in LIBRARY for p in sorted((ROOT / folder).rglob("*.py"))]
    assert len(modules) > 50  # the scan found the package
    return modules


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importing node, imported node) -> where, for every import between two nodes."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in library_modules():
        source = node_of(module_name(path))
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in imported_modules(tree):
            target = node_of(name)
            if source and target and source != target:
                edges[(source, target)].append(f"{path.relative_to(ROOT)}:{line}")
    return edges


def test_every_package_has_a_layer():
    nodes = {node_of(module_name(p)) for p in library_modules()} - {None}
    assert sorted(nodes - set(LAYER_OF)) == []


def test_no_library_module_imports_kvbench_cli():
    offenders = [where for (source, target), places in import_edges().items()
                 if target == "kvbench.cli" and source != "kvbench.cli" for where in places]
    assert offenders == []


def test_dependencies_point_down():
    offenders = [f"{where} ({source} imports {target})"
                 for (source, target), places in import_edges().items()
                 if LAYER_OF[target] >= LAYER_OF[source] for where in places]
    assert offenders == []


def find_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_between_packages_is_acyclic():
    assert find_cycle(set(import_edges())) is None


def test_the_cycle_finder_finds_a_circle():
    assert find_cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"]
    assert find_cycle({("a", "b"), ("a", "c"), ("b", "c")}) is None


def test_the_scan_sees_every_spelling_of_an_import():
    for source in ("import kvbench.cli", "from kvbench.cli.app import main",
                   "from kvbench import cli", "importlib.import_module('kvbench.cli.run')",
                   "def f():\n    from kvbench.cli import main",
                   "if TYPE_CHECKING:\n    from kvbench.cli import main"):
        names = [name for _, name in imported_modules(ast.parse(source))]
        assert any(node_of(n) == "kvbench.cli" for n in names), source
    names = [n for _, n in imported_modules(ast.parse("from kvbench import config"))]
    assert names == ["kvbench.config"]


def test_every_import_inside_a_function_says_why():
    """An import inside a function hides a dependency: it is kept only to defer a heavy or
    optional one (torch, pandas, plotly, ray, transformers, ...) and says so on its line or
    in the comment just above its group of imports."""
    unexplained = []
    for path in library_modules():
        lines = path.read_text(encoding="utf-8").split("\n")
        tree = ast.parse("\n".join(lines), filename=str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                above = node.lineno - 2
                while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
                    above -= 1
                while above >= 0 and not lines[above].strip():  # a blank line inside a group
                    above -= 1
                    while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
                        above -= 1
                if "#" not in lines[node.lineno - 1] and not (
                        above >= 0 and lines[above].strip().startswith("#")):
                    unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert unexplained == []
