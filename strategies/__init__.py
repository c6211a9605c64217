"""Cache strategies: KV allocation bookkeeping (block ids, ranges, counts), never tensors."""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.errors import KvbenchInputError
from kvbench.strategies.base import CacheStrategy, MemorySplit
from kvbench.strategies.contiguous import ContiguousStrategy
from kvbench.strategies.paged import PagedStrategy


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
) -> CacheStrategy:
    strategy_info(name)
    if name == "contiguous":
        return ContiguousStrategy(num_slots, max_model_len, reserve=reserve)
    return PagedStrategy(num_slots, max_model_len, block_size=block_size, watermark=watermark)


__all__ = ["CacheStrategy", "MemorySplit", "STRATEGIES", "StrategyInfo", "make_strategy",
           "strategy_info"]
