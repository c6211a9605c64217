"""Versions of what produced a result, for `config.json` and report headers."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
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


def versions() -> dict[str, str | None]:
    import torch

    return {
        "kvbench": kvbench.__version__,
        "git": git_revision(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "cuda": torch.version.cuda,
        "platform": platform.platform(),
    }
