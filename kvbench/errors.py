"""Errors the CLI turns into exit codes (docs/design.md, CLI conventions)."""

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
