"""A one-line progress display on a terminal: requests done, tokens/s, KV use."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, enabled: bool, stream: TextIO | None = None) -> None:
        self.total = total
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.started = time.perf_counter()
        self._last = 0.0
        self._shown = False

    def update(self, done: int, tokens: int, kv_used: float | None) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        elapsed = now - self.started
        if now - self._last < 0.2 or elapsed < 1.0:  # only runs longer than a second
            return
        self._last = now
        width = 24
        filled = int(width * done / max(self.total, 1))
        kv = f"  KV {kv_used:5.1%}" if kv_used is not None else ""
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} req"
            f"  {tokens / max(elapsed, 1e-9):8.1f} tok/s{kv}"
        )
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * 90 + "\r")
            self.stream.flush()
