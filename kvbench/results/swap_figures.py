"""Preemption by swap's figures for a run's summary (`scheduler`'s keys; docs/offload.md).

With a host tier the run states its `preemption_mode`; under `swap` (`--preemption-mode swap`)
the strategy's counters (`host_swap_*`: victims swapped out, the blocks the tier kept for them
and those copied then, the victims that recomputed because the tier could not hold them, the
re-admissions that loaded their KV back) are joined by the bytes that crossed the host link
each way for them, across the tensor-parallel group, and how long a swapped-in request waited
for its load (re-admission to the load's end).
"""

from __future__ import annotations

from typing import Any

from kvbench.results.metrics import latency_stats


def swap_figures(engine: Any) -> dict[str, Any]:
    """The swap keys of `engine`'s run; none without a host tier."""
    strategy = getattr(engine, "strategy", None)
    if getattr(strategy, "host_tier", None) is None:
        return {}
    mode = engine.policy.limits.preemption_mode
    if mode != "swap":
        return {"preemption_mode": mode}
    stats = strategy.stats()
    block_bytes = engine.bytes_per_slot * strategy.block_size
    waits_ms = [1000.0 * w for w in engine.swap_in_waits_s]
    return {
        "preemption_mode": mode,
        "swap_out_bytes": stats["host_swap_out_copied_blocks"] * block_bytes,
        "swap_in_bytes": stats["host_swap_in_blocks"] * block_bytes,
        "swap_in_wait_ms": latency_stats(waits_ms) if waits_ms else None,
    }
