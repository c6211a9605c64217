"""Import kvbench from a source checkout without installing it (offline GPU boxes).

pyproject.toml maps ``kvbench.kernels``, ``kvbench.strategies`` and ``kvbench.workloads`` to
the top-level folders ``kernels/``, ``strategies/``, ``workloads/``. An installed package does
that; a bare ``PYTHONPATH=<repo>`` does not. With ``PYTHONPATH=<repo>/scripts/pyshim:<repo>``
this file (run by Python at start-up) adds a finder that resolves exactly those three names to
their folders. scripts/gpu_check.sh sets it up; nothing else uses it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
_REMAP = {f"kvbench.{name}": _REPO / name for name in ("kernels", "strategies", "workloads")}


class _RemapFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        folder = _REMAP.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


if not any(isinstance(f, _RemapFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _RemapFinder())
