"""An engine's options as vLLM's flags, for the start-up model (`kvbench.sizing.vllm_startup`).

One translation for both users of the model: the simulator's KV budget (`SimulatedExecutors`)
and the prediction `kvbench run` prints beside the budget it measures on CUDA
(`ModelExecutors`).
"""

from __future__ import annotations

from kvbench.config import EngineConfig
from kvbench.models.dtype_names import element_bytes, kv_cache_dtype_name
from kvbench.models.sizes import canonical_dtype
from kvbench.sizing.checkpoint import resolve_checkpoint
from kvbench.sizing.vllm_startup import VllmFlags


def vllm_flags(config: EngineConfig, max_batched_tokens: int, dtype: str) -> VllmFlags:
    """`config` as vLLM's flags; `dtype` is the weights' (torch's name: `bfloat16`)."""
    checkpoint = resolve_checkpoint(config.model, config.quantization)
    kv_name = kv_cache_dtype_name(config)
    return VllmFlags(
        gpu_memory_utilization=config.gpu_memory_utilization,
        max_model_len=config.max_model_len,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=max_batched_tokens,
        block_size=config.block_size,
        kv_cache_dtype="fp8" if element_bytes(kv_name) == 1 else canonical_dtype(kv_name),
        dtype=canonical_dtype(dtype),
        quantization=checkpoint.quantization,
        enforce_eager=bool(config.enforce_eager),
        tensor_parallel_size=config.tensor_parallel_size,
        weights_memory=config.weights_memory,
        vllm_version=config.vllm_version,
    )
