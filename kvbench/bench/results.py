"""Atomic writes of a results folder; an unfinished folder carries an `INCOMPLETE` marker."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from kvbench.bench.metrics import nan_to_none

INCOMPLETE_MARKER = "INCOMPLETE"


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(nan_to_none(data), indent=2, sort_keys=False) + "\n")


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    atomic_write_text(path, frame.to_csv(index=False))


class ResultsFolder:
    """`results/<run-id>/`: marked incomplete from creation until `complete()`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json(self.path / INCOMPLETE_MARKER, {"status": "running"})

    def mark(self, status: str, message: str = "") -> None:
        write_json(self.path / INCOMPLETE_MARKER, {"status": status, "message": message})

    def complete(self) -> None:
        (self.path / INCOMPLETE_MARKER).unlink(missing_ok=True)

    @staticmethod
    def is_complete(path: Path) -> bool:
        return (Path(path) / "summary.json").is_file() and not (
            Path(path) / INCOMPLETE_MARKER
        ).exists()
