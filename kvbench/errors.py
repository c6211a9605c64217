"""Errors the CLI turns into exit codes (`kvbench.cli.app.failure`, docs/cli.md)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any


class KvbenchInputError(ValueError):
    """Bad usage or input: the CLI prints the message on one line and exits 2."""


class KvbenchRunError(RuntimeError):
    """A failure while running: the CLI prints it with the partial-results path and exits 1."""


class RunInterrupted(Exception):
    """Ctrl-C during a run: partial results were written to `folder` (the CLI exits 130)."""

    def __init__(self, folder: Path, finished: list[str] | None = None) -> None:
        # `finished`: a comparison's strategies whose runs were complete when it stopped.
        done = "" if finished is None else f"; finished: {', '.join(finished) or 'none'}"
        super().__init__(f"interrupted{done}; partial results in {folder}")
        self.folder = folder
        self.finished = finished


def os_error_line(err: OSError) -> str:
    """An I/O error in one line, naming its path: `PATH: No space left on device`."""
    reason = err.strerror or str(err) or type(err).__name__
    if err.filename is None:
        return reason
    where = f"{err.filename} -> {err.filename2}" if err.filename2 else str(err.filename)
    return f"{where}: {reason}"


# Optional dependencies: the name users know and what installs it (pyproject.toml's extras;
# triton is a dependency on Linux x86-64 only).
OPTIONAL = {
    "transformers": ("transformers", "pip install 'kvbench[hf]'"),
    "ray": ("Ray", "pip install 'kvbench[ray]'"),
    "triton": ("Triton", "pip install 'triton>=3.0'"),
}


def missing_dependency(module: str, feature: str, err: ImportError | None = None) -> \
        KvbenchInputError:
    """The one line for `feature` without the optional `module`: which extra installs it,
    never that the user's input is wrong."""
    name, install = OPTIONAL[module]
    absent = err is None or (isinstance(err, ModuleNotFoundError)
                             and (err.name or module).partition(".")[0] == module)
    why = "which is not installed" if absent else f"which cannot be imported ({err})"
    return KvbenchInputError(f"{feature} needs {name}, {why}: {install}")


def optional_import(module: str, feature: str) -> Any:
    """`import module`, an optional dependency (a key of `OPTIONAL`), for `feature`."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise missing_dependency(module, feature, err) from None
