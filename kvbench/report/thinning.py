"""Which steps a chart with one point per step draws: a long simulation has millions of steps,
and a plotly line of a million points makes a page of hundreds of MB that a browser cannot
draw. The steps are cut into equal buckets (by step index) and each bucket keeps, for every
series the chart draws, its lowest and its highest point, so every spike and every dip
still shows (docs/reports.md, Long runs)."""

from __future__ import annotations

import numpy as np


def even_rows(n: int, max_points: int) -> np.ndarray:
    """Indices of n rows: all of them, or `max_points` spread evenly, the first and last kept."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))


def extreme_rows(series: list[np.ndarray], max_points: int) -> np.ndarray:
    """Indices (ascending) of the rows to draw of series of equal length: all of them when
    they have at most `max_points` rows; else, per bucket, the first row holding each
    series' minimum and the first holding its maximum (NaN is ignored), and the first and
    last rows, at most `max_points` in all."""
    n = len(series[0]) if series else 0
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, (max_points - 2) // (2 * len(series)))
    starts = np.unique(np.arange(buckets) * n // buckets)
    bucket_of = np.searchsorted(starts, np.arange(n), side="right") - 1
    positions = np.arange(n)
    keep = [np.array([0, n - 1])]
    for values in series:
        values = np.asarray(values, dtype=float)
        for reduce in (np.fmin, np.fmax):
            extreme = reduce.reduceat(values, starts)
            hit = values == extreme[bucket_of]  # NaN rows and all-NaN buckets never hit
            first = np.minimum.reduceat(np.where(hit, positions, n), starts)
            keep.append(first[first < n])
    return np.unique(np.concatenate(keep))


def peak_rows(counts: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Where a chart marks rows with a count (preemptions): every row with a count when at
    most `max_points` have one; else, per bucket of rows, the row with the largest count,
    with the bucket's total. Returns (row indices, the count each mark stands for)."""
    counts = np.asarray(counts)
    rows = np.flatnonzero(counts > 0)
    if rows.size <= max_points:
        return rows, counts[rows]
    starts = np.unique(np.arange(max_points) * len(counts) // max_points)
    totals = np.add.reduceat(counts, starts)
    bucket_of = np.searchsorted(starts, np.arange(len(counts)), side="right") - 1
    peak = counts == np.maximum.reduceat(counts, starts)[bucket_of]
    first = np.minimum.reduceat(np.where(peak, np.arange(len(counts)), len(counts)), starts)
    marked = totals > 0
    return first[marked], totals[marked]
