"""SLO capacity: the highest request rate (or concurrency) at which a configuration meets an SLO.

`Bisection` brackets it, per combination of the other axes, between a value that meets the
SLO (`lo`, the answer) and one that does not (`hi`), probing the geometric middle until
`hi / lo <= 1 + tolerance` (integer axes: `hi - lo <= 1`); docs/sweep.md, "SLO capacity
search", gives the steps and the assumption (meeting the SLO is monotone in the axis).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

EXACT = "bracketed"
BELOW = "below_range"
ABOVE = "above_range"


@dataclass
class Bisection:
    lo: float
    hi: float
    tolerance: float
    integer: bool = False
    results: dict[float, bool] = field(default_factory=dict)  # value -> met the SLO

    def record(self, value: float, met: bool) -> None:
        self.results[float(value)] = bool(met)

    def bracket(self) -> tuple[float | None, float | None]:
        """(largest value meeting the SLO below every miss, smallest value missing it)."""
        misses = [v for v, ok in self.results.items() if not ok]
        hi = min(misses) if misses else None
        passes = [v for v, ok in self.results.items() if ok and (hi is None or v < hi)]
        return (max(passes) if passes else None), hi

    def next_value(self) -> float | None:
        """The next value to probe, None when the search is over."""
        lo, hi = self.bracket()
        if lo is None:
            if hi is not None and hi <= self.lo:
                return None  # below the range
            return self._fresh(self.lo)
        if hi is None:
            if lo >= self.hi:
                return None  # the top of the range meets the SLO
            return self._fresh(self.hi)
        if self._narrow(lo, hi):
            return None
        if self.integer:
            mid = float(math.floor(math.sqrt(lo * hi)))
            mid = min(max(mid, lo + 1), hi - 1)
        else:
            mid = float(f"{math.sqrt(lo * hi):.4g}")  # four significant digits
            if not lo < mid < hi:
                mid = (lo + hi) / 2
        return self._fresh(mid)

    def _narrow(self, lo: float, hi: float) -> bool:
        if self.integer:
            return hi - lo <= 1
        return hi <= lo * (1 + self.tolerance)

    def _fresh(self, value: float) -> float | None:
        return None if value in self.results else value

    def outcome(self) -> dict[str, Any]:
        lo, hi = self.bracket()
        if lo is None:
            status, capacity = BELOW, None
        elif hi is None:
            status, capacity = ABOVE, lo
        else:
            status, capacity = EXACT, lo
        return {"capacity": capacity, "status": status, "lo": lo, "hi": hi,
                "probes": len(self.results)}


def numeric(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None
