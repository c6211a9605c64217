"""KV capacity: the tokens (and whole sequences) a KV budget holds, on one GPU or a group.

`kv_capacity` is the one formula (floor(budget / bytes per token), then whole sequences): the
engine's arena slots, `kvbench estimate`'s capacity and per-strategy concurrency all count
with it. Under tensor parallelism the budget and bytes per token are one GPU's (1/N of the KV
heads; a latent row whole) and the group holds the same tokens on each GPU. Per sequence the
strategies differ (`sequence_slots`): one table for every layer, or `hybrid`'s allocation
groups (`kvbench.core.kv_allocation`), a window group capped at ceil(W / block) + 1 blocks.
"""

from __future__ import annotations

from kvbench.core.kv_allocation import HybridAllocation


def kv_capacity(budget_bytes: int, bytes_per_token: int, tokens_per_sequence: int = 1) -> int:
    """Whole sequences of `tokens_per_sequence` tokens that `budget_bytes` of KV hold.

    With `tokens_per_sequence` 1 (the default) that is the budget's token capacity. Counted
    from whole tokens, so `kv_capacity(b, t, n) == kv_capacity(b, t) // n` always.
    """
    return budget_bytes // bytes_per_token // tokens_per_sequence


def sequence_slots(context: int, block_size: int,
                   allocation: HybridAllocation | None = None) -> int:
    """Slots one decoding sequence of `context` tokens holds: its blocks (one table for every
    layer), or under `hybrid` the sum over allocation groups (window groups capped at
    ceil(W / block) + 1 blocks)."""
    blocks = -(-context // block_size)
    if allocation is None:
        return blocks * block_size
    total = 0
    for group in allocation.groups:
        held = blocks if group.window is None else min(blocks, -(-group.window // block_size) + 1)
        total += held * block_size
    return total
