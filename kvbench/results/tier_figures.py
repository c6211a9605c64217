"""A host tier's figures for a run's summary (`scheduler`'s keys; docs/offload.md).

With `--kv-offload` the strategy's own counters (`host_*`: blocks stored, loaded, evicted,
refused, resident) are joined by what a user sizing a tier reads first: the prefix hit rate
split per tier (over the same prompt tokens as `prefix_hit_rate`: tokens of admitted
sequences), the bytes that crossed the host link each way across the tensor-parallel group,
and how long requests waited for their KV to load before their prefill (the loading part of
TTFT, from admission to the load's end, over the requests that loaded; `latency_ms.host_load`
is the same wait per sample, 0 for one that loaded nothing, and
`latency_ms.prefill` = `host_load` + `prefill_compute`).

The run also states its `preemption_mode`; under `swap` (`--preemption-mode swap`) the
strategy's counters (`host_swap_*`: victims swapped out, the blocks the tier kept for them and
those copied then, the victims that recomputed because the tier could not hold them, the
re-admissions that loaded their KV back) are joined by the bytes that crossed the host link
each way for them, across the tensor-parallel group, and how long a swapped-in request waited
for its load (re-admission to the load's end).
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
