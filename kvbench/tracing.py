"""NVTX ranges around engine phases, mirrored into an optional Chrome-trace recorder.

`nvtx` is optional at run time: without the package (or without a profiler attached) a
range costs one attribute lookup and a context manager.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

try:  # pragma: no cover - depends on the environment
    import nvtx as _nvtx
except Exception:  # noqa: BLE001 - any failure to load NVTX means "no NVTX"
    _nvtx = None


class TraceRecorder:
    """Collects complete ("X") events and counters in Chrome trace format (microseconds)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.origin_s = time.perf_counter()

    def _us(self, t_s: float) -> float:
        return (t_s - self.origin_s) * 1e6

    def complete(self, name: str, start_s: float, end_s: float, args: dict[str, Any]) -> None:
        self.events.append(
            {"name": name, "ph": "X", "ts": self._us(start_s), "dur": (end_s - start_s) * 1e6,
             "pid": 1, "tid": 1, "args": args}
        )

    def counter(self, name: str, t_s: float, values: dict[str, float]) -> None:
        self.events.append({"name": name, "ph": "C", "ts": self._us(t_s), "pid": 1, "args": values})


_recorder: TraceRecorder | None = None


def set_recorder(recorder: TraceRecorder | None) -> None:
    global _recorder
    _recorder = recorder


def get_recorder() -> TraceRecorder | None:
    return _recorder


@contextlib.contextmanager
def trace_range(name: str, **args: Any) -> Iterator[None]:
    """An NVTX range (message: the args) and, when recording, a Chrome-trace event."""
    recorder = _recorder
    if _nvtx is None and recorder is None:
        yield
        return
    message = name if not args else f"{name} " + " ".join(f"{k}={v}" for k, v in args.items())
    start = time.perf_counter()
    if _nvtx is not None:
        _nvtx.push_range(message, domain="kvbench")
    try:
        yield
    finally:
        if _nvtx is not None:
            _nvtx.pop_range(domain="kvbench")
        if recorder is not None:
            recorder.complete(name, start, time.perf_counter(), args)
