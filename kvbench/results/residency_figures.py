"""A prefix cache's residency figures for a run's summary: vLLM's KV cache residency metrics
per tier (`strategies/block_residency.py`), the lookups' reuse distances and LRU hit-rate curve
(`strategies/reuse_distance.py`) and their quantiles for the report (results/README.md lists
each key).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbench.results.metrics import latency_stats

CDF_QUANTILES = np.linspace(0.0, 1.0, 51)
CURVE_POINTS = 64

# summary key -> (tier, series of `BlockResidency`)
SERIES = {
    "kv_block_lifetime_ms": ("gpu", "lifetimes_s"),
    "kv_block_idle_before_evict_ms": ("gpu", "idle_s"),
    "kv_block_reuse_gap_ms": ("gpu", "reuse_gaps_s"),
    "host_block_lifetime_ms": ("host", "lifetimes_s"),
    "host_block_idle_before_evict_ms": ("host", "idle_s"),
    "host_block_reuse_gap_ms": ("host", "reuse_gaps_s"),
}


def distribution(values: np.ndarray) -> dict[str, Any]:
    """mean, p50, p90, p99, max (None when empty) and count."""
    return {**latency_stats(values), "count": int(values.size)}


def reuse_curve(distances: np.ndarray, lookup_tokens: int, block_size: int,
                sizes: list[int]) -> dict[str, Any]:
    """Hit rate of an LRU cache of N blocks, for N on a log grid and at `sizes`: the share
    of `lookup_tokens` in looked-up blocks whose distance is below N."""
    finite = np.sort(distances[distances >= 0])
    top = max([int(finite[-1]) + 1 if finite.size else 1, *sizes])
    grid = np.unique(np.concatenate([
        np.rint(np.geomspace(1, top, CURVE_POINTS)).astype(np.int64),
        np.array(sizes, dtype=np.int64)]))
    hits = np.searchsorted(finite, grid, side="left")
    scale = block_size / lookup_tokens if lookup_tokens else 0.0
    return {"blocks": grid.tolist(), "hit_rate": (hits * scale).tolist(),
            "infinite_hit_rate": finite.size * scale}


def residency_figures(strategy: Any) -> dict[str, Any]:
    """The summary keys of `strategy`'s residency books; none without a prefix cache."""
    books = strategy.residency_books() if strategy is not None else None
    if books is None:
        return {}
    out: dict[str, Any] = {}
    cdf: dict[str, Any] = {}
    for key, (tier, series) in SERIES.items():
        recorder = getattr(books, tier)
        if recorder is None:
            continue
        values = 1000.0 * np.frombuffer(getattr(recorder, series), dtype=np.float64)
        out[key] = distribution(values)
        if values.size:
            cdf[key] = np.quantile(values, CDF_QUANTILES).tolist()
    reuse = books.reuse
    if reuse is not None:
        distances = np.frombuffer(reuse.distances, dtype=np.int64)
        reused = distances[distances >= 0].astype(np.float64)
        out["kv_block_reuse_distance"] = distribution(reused)
        sizes = [books.gpu_blocks] + ([books.host_blocks] if books.host_blocks else [])
        out["kv_reuse_curve"] = {
            **reuse_curve(distances, reuse.lookup_tokens, books.block_size, sizes),
            "gpu_blocks": books.gpu_blocks, "host_blocks": books.host_blocks,
            "lookup_blocks": int(distances.size)}
    if cdf:
        out["kv_residency_cdf_ms"] = {"q": CDF_QUANTILES.tolist(), **cdf}
    return out
