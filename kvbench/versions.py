"""Versions of what produced a result, for `config.json` and report headers.

torch's version and CUDA build are read from the loaded torch when a run loaded it, and
otherwise from the installed torch's `torch/version.py` without importing it (a simulation
never loads torch: its import alone costs seconds); both name the same installed torch.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import re
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
    try:  # torch/version.py's `cuda = '12.4'` (or None), read without running it
        folder = importlib.util.find_spec("torch").submodule_search_locations[0]
        text = (Path(folder) / "version.py").read_text(encoding="utf-8")
    except (ImportError, ValueError, AttributeError, TypeError, OSError):
        return _version("torch"), None
    cuda = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return _version("torch"), cuda.group(1) if cuda else None


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
