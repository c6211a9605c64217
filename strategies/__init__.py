"""Cache strategies: KV allocation bookkeeping (block ids, ranges, counts), never tensors.

Each strategy registers itself (`kvbench.strategies.registry`): a new one is one new file.
"""

from kvbench.strategies.registry import STRATEGIES, make_strategy, reads_option, swaps

__all__ = ["STRATEGIES", "make_strategy", "reads_option", "swaps"]
