"""`WeightedValues.stats` must be `latency_stats` of the expanded multiset: the percentiles
and the max to the bit (numpy's linear interpolation), the mean within 1e-12 (of the values'
magnitude, where values of both signs cancel)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.results.metrics import latency_stats
from kvbench.results.weighted import WeightedValues


def _check(values: list[float], counts: list[int]) -> None:
    weighted = WeightedValues(np.array(values, dtype=float), np.array(counts, dtype=np.int64))
    expanded = weighted.expand()
    assert expanded.size == len(weighted)
    got, want = weighted.stats(), latency_stats(expanded)
    for key in ("p50", "p90", "p99", "max"):
        # The same double (a zero's sign aside: which of 0.0 and -0.0 numpy's partition
        # puts first is its own affair, and no gap between two times is -0.0).
        assert (got[key] is None and want[key] is None) or got[key] == want[key] and (
            got[key] == 0 or np.float64(got[key]).tobytes() == np.float64(want[key]).tobytes()
        ), (key, got, want)
    if want["mean"] is None:
        assert got["mean"] is None
    else:
        # Within 1e-12 of the values' size: values of both signs cancel (a sum of 1e6s that
        # comes to 13), and each summation order rounds them its own way.
        scale = float(np.abs(expanded[~np.isnan(expanded)]).mean())
        assert math.isclose(got["mean"], want["mean"], rel_tol=1e-12,
                            abs_tol=max(1e-12 * scale, 1e-300))


_value = (st.floats(0, 1e4) | st.sampled_from([0.0, 1e-3, 12.5, 7.25, math.nan])
          | st.floats(-1e6, 1e6))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(_value, st.integers(0, 40)), max_size=40))
def test_stats_are_those_of_the_expanded_values(pairs):
    _check([v for v, _ in pairs], [c for _, c in pairs])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([1.0, 2.0, 2.0 + 2**-50, 3.5, 100.0]), min_size=1, max_size=8),
       st.integers(0, 10_000))
def test_ties_and_large_counts(values, seed):
    rng = np.random.default_rng(seed)
    _check(values, rng.integers(0, 3000, len(values)).tolist())


def test_edge_cases():
    _check([], [])
    _check([5.0], [0])  # nothing counted
    _check([5.0], [1])  # one value
    _check([math.nan, 2.0], [3, 1])  # NaN left out
    _check([math.nan], [2])
    _check([1.0, 2.0], [1, 1])
    _check([3.0, 1.0, 2.0], [1, 0, 100])
    # Every rank a percentile lands on, for small n: the interpolation's both branches.
    for n in range(1, 60):
        _check(np.arange(n, dtype=float)[::-1].tolist(), [1] * n)
        _check([0.1, 0.7, 0.3], [n, 1, n // 2])
