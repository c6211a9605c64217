"""Cache strategies: KV allocation bookkeeping (block ids, ranges, counts), never tensors.

Each strategy registers itself (`kvbench.strategies.registry`): a new one is one new file.
"""

from __future__ import annotations

from kvbench.strategies.base import CacheStrategy, MemorySplit
from kvbench.strategies.registry import (
    STRATEGIES,
    StrategyEntry,
    make_strategy,
    reads_option,
    register_strategy,
    register_variant,
)

__all__ = ["STRATEGIES", "CacheStrategy", "MemorySplit", "StrategyEntry", "make_strategy",
           "reads_option", "register_strategy", "register_variant"]
