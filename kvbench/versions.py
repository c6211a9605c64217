"""Versions of what produced a result, for `config.json` and report headers.

torch's version and CUDA build are read from the loaded torch when a run loaded it, and
otherwise from the installed torch's `torch/version.py` without importing it (a simulation
never loads torch: its import alone costs seconds); both name the same installed torch.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
from pathlib import Path

import kvbench


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_revision() -> str | None:
    root = Path(kvbench.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def torch_versions() -> tuple[str | None, str | None]:
    """(torch's version, the CUDA version torch was built with), torch loaded or not."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__), torch.version.cuda
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, None
    fields = _constants(Path(spec.submodule_search_locations[0]) / "version.py")
    version = fields.get("__version__") or _version("torch")
    return version, fields.get("cuda")


def _constants(path: Path) -> dict[str, str | None]:
    """The constant string (or None) assignments of a Python file, read without running it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    found: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign):  # `cuda: Optional[str] = '12.4'`
            target = node.target
        else:
            continue
        value = node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and (
            value.value is None or isinstance(value.value, str)
        ):
            found[target.id] = value.value
    return found


def versions() -> dict[str, str | None]:
    torch_version, cuda = torch_versions()
    return {
        "kvbench": kvbench.__version__,
        "git": git_revision(),
        "python": platform.python_version(),
        "torch": torch_version,
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "cuda": cuda,
        "platform": platform.platform(),
    }
