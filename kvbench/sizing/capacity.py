"""KV capacity: the tokens (and whole sequences) a KV budget holds, on one GPU or a group.

    tokens    = floor(budget / KV bytes per token)
    sequences = floor(tokens / tokens per sequence)

`kv_capacity` is the one formula: the engine's arena slots, `kvbench estimate`'s capacity and
per-strategy concurrency, and the tensor-parallel group below all count with it.

With tensor parallelism N (Megatron-style, as vLLM), every GPU holds 1/N of each matmul's
weights (attention heads, MLP columns, embedding and LM-head vocabulary rows) and a full copy
of the RMS norms (and of latent attention's down-projections), and 1/N of the KV heads of
every token (a latent-attention cache is whole on every GPU). So per GPU:

    weights   = ceil(sharded parameters / N) + replicated parameters      (x bytes per weight)
    budget    = floor(memory x utilization) - weights - activations       (`kv_budget_bytes`)
    per token = the sum over the model's KV groups of one GPU's share (KV heads / N)
    tokens    = floor(budget / per token)

and the group holds `tokens` tokens in N x budget bytes (the same token count on each GPU).

Per sequence the strategies differ (`sequence_slots`): `paged` (and every strategy with one
table for all layers) holds every layer for the whole context, so a slot is one token of every
layer; `hybrid` holds, per allocation group (`kvbench.core.kv_allocation`, a slot being one
token of one group's layers), the context for a full-attention group and at most
ceil(W / block) + 1 blocks (min(context, W + block), block-rounded) for a window group:

    paged:  sequences = floor(budget / (every layer's bytes per token) / context in blocks)
    hybrid: sequences = floor(budget / (group_size layers' bytes) / sum over groups of slots)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbench.core.kv_allocation import HybridAllocation
from kvbench.core.kv_groups import kv_bytes_per_token
from kvbench.models.config import ModelConfig
from kvbench.sizing.kv_budget import Utilization, kv_budget_bytes


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


@dataclass(frozen=True)
class GroupKVCapacity:
    tensor_parallel_size: int
    weight_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    kv_bytes_per_token_per_gpu: int
    capacity_tokens: int

    @property
    def kv_budget_bytes(self) -> int:
        """The group's KV bytes (all GPUs)."""
        return self.kv_budget_bytes_per_gpu * self.tensor_parallel_size


def weight_bytes_per_gpu(model: ModelConfig, tensor_parallel_size: int, weight_bytes: int) -> int:
    replicated = model.num_replicated_parameters()
    sharded = model.num_parameters() - replicated
    return (math.ceil(sharded / tensor_parallel_size) + replicated) * weight_bytes


def group_kv_capacity(
    model: ModelConfig,
    gpu_memory_bytes: int,
    tensor_parallel_size: int,
    memory_utilization: Utilization | None,
    weight_bytes: int,
    kv_element_bytes: int,
    activation_bytes_per_gpu: int = 0,
    *,
    gpu_name: str = "each GPU",
    advice: str = "use a larger --gpu, a higher --tensor-parallel-size, a smaller model or "
    "--dtype bfloat16",
) -> GroupKVCapacity:
    """Per-GPU KV budget and the group's token capacity; raises when nothing is left for KV.

    `memory_utilization` None is the default, 0.9; `gpu_name` names the GPU in that error,
    `advice` the ways out.
    """
    tp = int(tensor_parallel_size)
    groups = model.kv_groups(kv_element_bytes, tp)  # checks that tp splits the heads
    weights = weight_bytes_per_gpu(model, tp, weight_bytes)
    where = f" on {gpu_name}" + (f" at --tensor-parallel-size {tp}" if tp > 1 else "")
    budget = kv_budget_bytes(
        gpu_memory_bytes, memory_utilization, weights, activation_bytes_per_gpu, where=where,
        advice=advice,
    )
    per_token = kv_bytes_per_token(groups)
    return GroupKVCapacity(tp, weights, budget, per_token, kv_capacity(budget, per_token))


__all__ = ["GroupKVCapacity", "group_kv_capacity", "kv_capacity", "sequence_slots",
           "weight_bytes_per_gpu"]
