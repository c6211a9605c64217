"""The report's CDFs keep CDF_POINTS ranks of a long sample: each point must be the sorted
sample's value at that rank and its share, as a full sort gives them."""

from __future__ import annotations

import numpy as np

from kvbench.report.charts import CDF_POINTS, _cdf


def _sorted_cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.sort(values[~np.isnan(values)])
    n = values.size
    keep = np.unique(np.linspace(0, n - 1, CDF_POINTS).round().astype(int))
    return values[keep], (np.arange(1, n + 1) / n)[keep]


def test_long_sample_cdf_is_the_full_sorts_at_the_kept_ranks():
    rng = np.random.default_rng(0)
    values = np.round(rng.lognormal(3.0, 1.0, 50_000), 1)  # ties, as step times give ITLs
    values[rng.integers(0, values.size, 100)] = np.nan  # requests that never started
    x, y = _cdf(values)
    ref_x, ref_y = _sorted_cdf(values)
    assert x.size == CDF_POINTS
    np.testing.assert_array_equal(x, ref_x)
    np.testing.assert_array_equal(y, ref_y)
    assert y[-1] == 1.0 and x[-1] == np.nanmax(values)


def test_short_sample_cdf_keeps_every_value():
    x, y = _cdf(np.array([3.0, np.nan, 1.0, 2.0]))
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(y, [1 / 3, 2 / 3, 1.0])
    assert _cdf(np.array([np.nan]))[0].size == 0
