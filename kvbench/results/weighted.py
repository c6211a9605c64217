"""`WeightedValues`: a multiset of floats held as values with counts (a long run's hundreds of
millions of inter-token gaps are a few million distinct step-end differences), and the
statistics of `metrics.latency_stats` over it without expanding it: numpy's linear
percentiles, interpolated as `np.percentile` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvbench.results.metrics import PERCENTILES


@dataclass(frozen=True)
class WeightedValues:
    """`values[i]` taken `counts[i]` times (float64 and int64 arrays of one length; a value
    may repeat, a count may be 0)."""

    values: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return int(self.counts.sum())

    def expand(self) -> np.ndarray:
        """The multiset as one array (each value repeated by its count, in the given order)."""
        return np.repeat(self.values, self.counts)

    def ascending(self) -> tuple[np.ndarray, np.ndarray]:
        """The values with a count, NaN left out, ascending, and the running sum of their
        counts: the expanded sorted array's element k is `values[searchsorted(running, k,
        side="right")]`."""
        values, counts = self.values, self.counts
        keep = (counts > 0) & ~np.isnan(values)
        if not keep.all():
            values, counts = values[keep], counts[keep]
        order = np.argsort(values)
        return values[order], np.cumsum(counts[order])

    def stats(self) -> dict[str, float | None]:
        """`metrics.latency_stats` of `expand()`: mean, p50, p90, p99 and max, NaN values
        left out; all None when nothing is left."""
        values, running = self.ascending()
        if values.size == 0:
            return dict.fromkeys(("mean", "p50", "p90", "p99", "max"))
        n = int(running[-1])
        p50, p90, p99 = (_percentile(values, running, n, p / 100) for p in PERCENTILES)
        return {"mean": float(np.sum(values * np.diff(running, prepend=0))) / n,
                "p50": p50, "p90": p90, "p99": p99, "max": float(values[-1])}


def _percentile(values: np.ndarray, running: np.ndarray, n: int, q: float) -> float:
    """numpy's linear percentile `q` of the sorted multiset (`values` ascending, `running`
    the running sum of their counts, `n` in all)."""
    virtual = (n - 1) * q
    if virtual >= n - 1:
        return float(values[-1])
    previous = math.floor(virtual)
    below, above = (float(v) for v in values[np.searchsorted(
        running, [previous, previous + 1], side="right")])
    gamma = virtual - previous
    # (numpy's interpolation, the same float operations: exact at both ends)
    diff = above - below
    return above - diff * (1 - gamma) if gamma >= 0.5 else below + diff * gamma
