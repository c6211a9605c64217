"""Errors the CLI turns into exit codes (`kvbench.cli.app.failure`, docs/cli.md)."""

from __future__ import annotations

from pathlib import Path


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


def missing_extra(module: str, extra: str, feature: str) -> KvbenchInputError:
    """The error for an optional dependency that is not installed: what needs it and which
    extra installs it (never that the user's input is wrong)."""
    return KvbenchInputError(f"{feature} needs {module}, which is not installed: "
                             f"pip install 'kvbench[{extra}]'")
