"""The KV arena's byte budget: `--kv-memory`, or on CUDA `--gpu-memory-utilization` as vLLM does."""

from __future__ import annotations

import torch

from kvbench.config import DEFAULT_CPU_KV_MEMORY, EngineConfig
from kvbench.core.kv_cache_dtype import is_fp8_cache
from kvbench.errors import KvbenchInputError
from kvbench.models.llama import LlamaDecoder
from kvbench.units import parse_size_bytes

FP8 = torch.float8_e4m3fn


def kv_cache_torch_dtype(config: EngineConfig, model_dtype: torch.dtype) -> torch.dtype:
    return FP8 if is_fp8_cache(config.kv_cache_dtype) else model_dtype


def planned_kv_bytes(config: EngineConfig, device: torch.device) -> int:
    """The arena's bytes as known before the model is built (for the memory check).

    On CUDA without `--kv-memory` the budget is what `--gpu-memory-utilization` leaves after
    the measured weights and activations, so it cannot overflow the device: counted as 0.
    """
    if config.kv_memory is not None:
        return int(config.kv_memory)
    if device.type == "cuda":
        return 0
    return parse_size_bytes(DEFAULT_CPU_KV_MEMORY)


def resolve_kv_budget_bytes(
    config: EngineConfig, device: torch.device, model: LlamaDecoder, max_batched_tokens: int
) -> int:
    if config.kv_memory is not None:
        return int(config.kv_memory)
    if device.type != "cuda":
        if config.gpu_memory_utilization is not None:
            raise KvbenchInputError("--gpu-memory-utilization needs CUDA; use --kv-memory SIZE")
        return parse_size_bytes(DEFAULT_CPU_KV_MEMORY)
    fraction = config.gpu_memory_utilization or 0.9
    return _profile_cuda_budget(model, device, fraction, max_batched_tokens)


def _profile_cuda_budget(
    model: LlamaDecoder, device: torch.device, fraction: float, num_tokens: int
) -> int:
    """total × fraction − (weights + activation peak of one full-size prefill, measured)."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    ids = torch.zeros(num_tokens, dtype=torch.long, device=device)
    pos = torch.arange(num_tokens, device=device)

    def attend(_layer, q, k, v):  # causal attention without a cache: same activation shapes
        group = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True
        )
        return out.transpose(0, 1)

    with torch.inference_mode():
        model.logits(model(ids, pos, attend)[-1:])
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    _, total = torch.cuda.mem_get_info(device)
    budget = int(total * fraction) - peak
    if budget <= 0:
        raise KvbenchInputError(
            f"--gpu-memory-utilization {fraction} leaves no KV memory: weights and activations "
            f"peak at {peak / 2**30:.2f} GiB of {total / 2**30:.2f} GiB"
        )
    torch.cuda.empty_cache()
    return budget
