"""Cache strategies: KV allocation bookkeeping (block ids, ranges, counts), never tensors.

Each strategy registers itself (`kvbench.strategies.registry`): a new one is one new file.
"""

from __future__ import annotations

from typing import Any

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

# The names callers used before the registry (`strategy_info` validates a name).
StrategyInfo = StrategyEntry
strategy_info = strategy_entry


def __getattr__(name: str) -> Any:
    # `STRATEGIES` (name -> entry) is computed on use: the registry fills as modules load.
    if name == "STRATEGIES":
        return strategy_entries()
    raise AttributeError(f"module 'kvbench.strategies' has no attribute {name!r}")


__all__ = ["CacheStrategy", "MemorySplit", "StrategyEntry", "StrategyInfo", "describe_strategies",
           "make_strategy", "register_strategy", "register_variant", "strategy_entries",
           "strategy_entry", "strategy_info", "strategy_names"]
