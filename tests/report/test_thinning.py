"""Thinning of per-step charts: a long run's lines keep every bucket's extremes of every
series (so no spike or dip disappears), and its preemption marks stay few but count every
preemption; checked against a loop over the buckets."""

from __future__ import annotations

import numpy as np

from kvbench.report.thinning import extreme_rows, peak_rows


def _bucket_starts(n: int, buckets: int) -> list[int]:
    return sorted({b * n // buckets for b in range(buckets)})


def test_short_series_keep_every_row():
    assert extreme_rows([np.arange(10.0)], 10).tolist() == list(range(10))


def test_each_buckets_extremes_of_every_series_are_kept():
    rng = np.random.default_rng(0)
    n, max_points = 20_000, 300
    util = rng.random(n)
    util[rng.integers(0, n, 50)] = np.nan  # steps without a utilization
    waiting = np.repeat(rng.integers(0, 40, n // 100), 100).astype(float)  # long flat runs
    waiting[12_345] = 1_000  # one spike
    rows = extreme_rows([util, waiting], max_points)
    assert rows.size <= max_points and rows[0] == 0 and rows[-1] == n - 1
    assert np.all(np.diff(rows) > 0)
    assert 12_345 in rows
    buckets = (max_points - 2) // 4
    starts = _bucket_starts(n, buckets)
    kept = set(rows.tolist())
    for a, b in zip(starts, [*starts[1:], n], strict=True):
        for values in (util, waiting):
            part = values[a:b]
            for extreme in (np.nanmin(part), np.nanmax(part)):
                first = a + int(np.flatnonzero(part == extreme)[0])
                assert first in kept


def test_few_preemptions_are_each_marked():
    counts = np.zeros(1000, dtype=int)
    counts[[3, 500, 999]] = [1, 4, 2]
    at, marked = peak_rows(counts, 10)
    assert at.tolist() == [3, 500, 999] and marked.tolist() == [1, 4, 2]


def test_many_preemptions_get_a_mark_per_stretch_with_its_total():
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 3, 10_000) * (rng.random(10_000) < 0.3)
    at, marked = peak_rows(counts, 50)
    assert at.size <= 50
    assert marked.sum() == counts.sum()  # every preemption is counted by some mark
    starts = _bucket_starts(counts.size, 50)
    for row, total in zip(at.tolist(), marked.tolist(), strict=True):
        b = np.searchsorted(starts, row, side="right") - 1
        end = starts[b + 1] if b + 1 < len(starts) else counts.size
        stretch = counts[starts[b]:end]
        assert total == stretch.sum() and counts[row] == stretch.max()
