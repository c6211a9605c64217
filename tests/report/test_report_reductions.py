"""The report's reductions over numpy columns give what pandas gave when the report read
frames: the step-time chart's median per batch size (a group median), the TTFT split's mean
(pandas' skipna mean, to the bit) and the prefix hit-rate curve's order of requests."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.report.charts import _nanmean
from kvbench.report.step_charts import _medians

_values = st.one_of(st.floats(0, 1e4, allow_nan=False), st.just(float("nan")))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.integers(0, 6).map(float), st.just(float("nan"))),
                          _values), max_size=60))
def test_medians_are_pandas_group_medians(pairs):
    keys = np.array([k for k, _ in pairs], dtype=float)
    values = np.array([v for _, v in pairs], dtype=float)
    expected = pd.Series(values).groupby(keys).median()
    got_keys, got = _medians(keys, values)
    assert got_keys.tolist() == expected.index.tolist()
    assert np.array_equal(got, expected.to_numpy(), equal_nan=True)
    if not np.isnan(keys).any():  # int keys, as steps.csv's batch sizes
        int_keys, int_got = _medians(keys.astype(np.int64), values)
        assert int_keys.tolist() == expected.index.astype(int).tolist()
        assert np.array_equal(int_got, got, equal_nan=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(_values, max_size=200))
def test_nanmean_is_pandas_mean_to_the_bit(values):
    expected = pd.Series(values, dtype=float).mean()
    got = _nanmean(np.array(values, dtype=float))
    assert got == expected or (np.isnan(got) and np.isnan(expected))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([0.5, 1.0, 2.0]), st.floats(0, 5),
                          st.just(float("nan"))), max_size=80))
def test_hit_rate_order_is_pandas_sort_values(times):
    """Requests admitted at one instant come in pandas' order (its quicksort's), so the
    cumulative hit-rate curve's steps between them are the ones it drew."""
    at_s = np.array(times, dtype=float)
    frame = pd.DataFrame({"admitted_s": at_s, "row": np.arange(at_s.size)})
    expected = frame.dropna(subset=["admitted_s"]).sort_values("admitted_s")["row"].to_numpy()
    order = np.flatnonzero(~np.isnan(at_s))
    assert order[np.argsort(at_s[order])].tolist() == expected.tolist()
