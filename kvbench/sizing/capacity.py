"""KV capacity of a tensor-parallel group: what each GPU keeps for KV after its weight shard.

With tensor parallelism N (Megatron-style, as vLLM), every GPU holds 1/N of each matmul's
weights (attention heads, MLP columns, embedding and LM-head vocabulary rows) and a full copy
of the RMS norms, and 1/N of the KV heads of every token. So per GPU:

    weights   = ceil(sharded parameters / N) + norm parameters            (x bytes per weight)
    budget    = floor(memory x utilization) - weights - activations
    per token = the sum over the model's KV groups of one GPU's share (KV heads / N)
    tokens    = floor(budget / per token)

and the group holds `tokens` tokens in N x budget bytes (the same token count on each GPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbench.core.kv_groups import kv_bytes_per_token
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig


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
    norms = model.hidden_size * (2 * model.num_layers + 1)
    sharded = model.num_parameters() - norms
    return (math.ceil(sharded / tensor_parallel_size) + norms) * weight_bytes


def group_kv_capacity(
    model: ModelConfig,
    gpu_memory_bytes: int,
    tensor_parallel_size: int,
    memory_utilization: float,
    weight_bytes: int,
    kv_element_bytes: int,
    activation_bytes_per_gpu: int = 0,
) -> GroupKVCapacity:
    """Per-GPU KV budget and the group's token capacity; raises when nothing is left for KV."""
    tp = int(tensor_parallel_size)
    model.check_tensor_parallel(tp)
    if not 0 < memory_utilization <= 1:
        raise KvbenchInputError("--gpu-memory-utilization must be in (0, 1]")
    weights = weight_bytes_per_gpu(model, tp, weight_bytes)
    usable = math.floor(gpu_memory_bytes * memory_utilization)
    budget = usable - weights - activation_bytes_per_gpu
    if budget <= 0:
        raise KvbenchInputError(
            f"{model.name} does not fit: {weights / 2**30:.1f} GiB of weights per GPU at "
            f"--tensor-parallel-size {tp} leave no KV memory in "
            f"{usable / 2**30:.1f} GiB usable; use more GPUs or a larger one"
        )
    per_token = kv_bytes_per_token(model.kv_groups(kv_element_bytes, tp))
    return GroupKVCapacity(tp, weights, budget, per_token, budget // per_token)


__all__ = ["GroupKVCapacity", "group_kv_capacity", "weight_bytes_per_gpu"]
