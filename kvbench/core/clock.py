"""The run's clock: wall time since the run started (the simulator brings its own)."""

from __future__ import annotations

import time
from typing import Protocol


class RunClock(Protocol):
    """What an engine and the runner need of a clock: seconds on the run's clock, back to
    zero when the measured run starts, and a wait for the next arrival."""

    def __call__(self) -> float: ...

    def reset(self) -> None: ...

    def sleep_until(self, t_s: float) -> None: ...


class WallClock:
    """Seconds since `reset()`; `sleep_until` waits for real."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()

    def reset(self) -> None:
        self.origin = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.origin

    def sleep_until(self, t_s: float) -> None:
        delay = t_s - self()
        if delay > 0:
            time.sleep(min(delay, 0.05))
