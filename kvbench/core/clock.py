"""The run's clock: wall time since the run started (the simulator brings its own)."""

from __future__ import annotations

import time


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
