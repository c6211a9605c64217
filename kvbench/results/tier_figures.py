"""A host tier's figures for a run's summary (`scheduler`'s keys): beside the strategy's own
`host_*` and, under `--preemption-mode swap`, `host_swap_*` counters, the prefix hit rate per
tier, the bytes that crossed the host link each way across the tensor-parallel group and the
waits for loads (docs/offload.md, Results).
"""

from __future__ import annotations

from typing import Any

from kvbench.results.metrics import latency_stats


def tier_figures(engine: Any) -> dict[str, Any]:
    """The host tier's summary keys of `engine`'s run; none without a host tier."""
    strategy = getattr(engine, "strategy", None)
    if getattr(strategy, "host_tier", None) is None:
        return {}
    stats = strategy.stats()
    query = stats["cache_query_tokens"]
    host_hits = stats["host_hit_tokens"]
    block_bytes = engine.bytes_per_slot * strategy.block_size
    waits_ms = [1000.0 * w for w in engine.host_load_waits_s]
    steps = engine.step_recorder.num_steps
    return {
        "gpu_hit_rate": (stats["cache_hit_tokens"] - host_hits) / query if query else None,
        "host_hit_rate": host_hits / query if query else None,
        "host_stored_bytes": stats["host_stored_blocks"] * block_bytes,
        "host_loaded_bytes": stats["host_loaded_blocks"] * block_bytes,
        "host_loaded_blocks_per_step": stats["host_loaded_blocks"] / steps if steps else None,
        "host_stored_blocks_per_step": stats["host_stored_blocks"] / steps if steps else None,
        "host_load_requests": len(waits_ms),
        "host_load_wait_ms": latency_stats(waits_ms) if waits_ms else None,
        **_swap_figures(engine, stats, block_bytes),
    }


def _swap_figures(engine: Any, stats: dict[str, Any], block_bytes: int) -> dict[str, Any]:
    mode = engine.policy.limits.preemption_mode
    if mode != "swap":
        return {"preemption_mode": mode}
    waits_ms = [1000.0 * w for w in engine.swap_in_waits_s]
    return {
        "preemption_mode": mode,
        "swap_out_bytes": stats["host_swap_out_copied_blocks"] * block_bytes,
        "swap_in_bytes": stats["host_swap_in_blocks"] * block_bytes,
        "swap_in_wait_ms": latency_stats(waits_ms) if waits_ms else None,
    }
