"""KV capacity: the tokens (and whole sequences) a KV budget holds, on one GPU or a group.

    tokens    = floor(budget / KV bytes per token)
    sequences = floor(tokens / tokens per sequence)

`kv_capacity` is the one formula: the engine's arena slots, `kvbench estimate`'s capacity and
per-strategy concurrency, and the tensor-parallel group below all count with it.

With tensor parallelism N every GPU holds 1/N of the KV heads of every token (a
latent-attention cache is whole on every GPU), and the group holds the same token count on
each GPU; what each GPU's budget is comes from `kvbench.sizing.vllm_startup` (vLLM's profile)
or `kvbench.sizing.kv_budget` (explicit shapes, `kvbench run`).

Per sequence the strategies differ (`sequence_slots`): `paged` (and every strategy with one
table for all layers) holds every layer for the whole context, so a slot is one token of every
layer; `hybrid` holds, per allocation group (`kvbench.core.kv_allocation`, a slot being one
token of one group's layers), the context for a full-attention group and at most
ceil(W / block) + 1 blocks (min(context, W + block), block-rounded) for a window group:

    paged:  sequences = floor(budget / (every layer's bytes per token) / context in blocks)
    hybrid: sequences = floor(budget / (group_size layers' bytes) / sum over groups of slots)
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
