"""Cache strategies: KV allocation bookkeeping (block ids, ranges, counts), never tensors."""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.errors import KvbenchInputError
from kvbench.strategies.base import CacheStrategy, MemorySplit
from kvbench.strategies.contiguous import ContiguousStrategy
from kvbench.strategies.paged import PagedStrategy
from kvbench.strategies.prefix import PrefixCachingStrategy


@dataclass(frozen=True)
class StrategyInfo:
    name: str
    summary: str
    kv_cache_dtype: str | None = None  # forced cache dtype (fp8 is paged + fp8 KV)


STRATEGIES: dict[str, StrategyInfo] = {
    "contiguous": StrategyInfo(
        "contiguous", "one range per request reserved at admission (--reserve max|pow2|exact)"
    ),
    "paged": StrategyInfo("paged", "fixed-size blocks from a pool, per-sequence block tables"),
    "prefix": StrategyInfo(
        "prefix",
        "paged + block-level prefix caching (hash chain, LRU eviction, copy-on-write forks)",
    ),
    "fp8": StrategyInfo(
        "fp8", "paged with an fp8 (e4m3) KV cache: --kv-cache-dtype fp8", kv_cache_dtype="fp8"
    ),
}


def strategy_info(name: str) -> StrategyInfo:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KvbenchInputError(
            f"unknown strategy {name!r} (strategies: {', '.join(STRATEGIES)})"
        ) from None


def make_strategy(
    name: str,
    num_slots: int,
    max_model_len: int,
    *,
    block_size: int = 16,
    reserve: str = "max",
    watermark: float = 0.01,
    namespace: str = "",
) -> CacheStrategy:
    """Build strategy `name`. `namespace` keys the prefix cache's hashes (model, dtype, KV-cache
    dtype), so blocks of different configurations never match."""
    strategy_info(name)
    if name == "contiguous":
        return ContiguousStrategy(num_slots, max_model_len, reserve=reserve)
    if name == "prefix":
        return PrefixCachingStrategy(
            num_slots, max_model_len, block_size=block_size, watermark=watermark,
            namespace=namespace,
        )
    strategy = PagedStrategy(num_slots, max_model_len, block_size=block_size, watermark=watermark)
    if name == "fp8":  # the cache dtype is the executor's business: bookkeeping is paged
        strategy.name = "fp8"
    return strategy


__all__ = ["CacheStrategy", "MemorySplit", "PagedStrategy", "PrefixCachingStrategy", "STRATEGIES",
           "StrategyInfo", "make_strategy", "strategy_info"]
