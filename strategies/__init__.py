"""Cache strategies: KV allocation bookkeeping (block ids, ranges, counts), never tensors.

Each strategy registers itself (`kvbench.strategies.registry`): a new one is one new file.
"""

from __future__ import annotations

from kvbench.strategies.base import CacheStrategy, MemorySplit
from kvbench.strategies.registry import (
    StrategyEntry,
    describe_strategies,
    make_strategy,
    register_strategy,
    register_variant,
    strategy_entries,
    strategy_entry,
    strategy_names,
)

__all__ = ["CacheStrategy", "MemorySplit", "StrategyEntry", "describe_strategies",
           "make_strategy", "register_strategy", "register_variant", "strategy_entries",
           "strategy_entry", "strategy_names"]
