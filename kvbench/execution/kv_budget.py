"""The KV arena's dtype and bytes as torch sees them, and the CUDA memory its budget is cut from.

The budget's formula is `kvbench.sizing.kv_budget.kv_budget_bytes`; on CUDA it is fed by
`profile_cuda_memory`, which measures the weights and the activation peak of one full-size
prefill of the real model (what vLLM profiles).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvbench.config import DEFAULT_CPU_KV_MEMORY, EngineConfig
from kvbench.core.kv_cache_dtype import is_fp8_cache
from kvbench.models.llama import LlamaDecoder
from kvbench.units import parse_size_bytes

FP8 = torch.float8_e4m3fn


def kv_cache_torch_dtype(config: EngineConfig, model_dtype: torch.dtype) -> torch.dtype:
    return FP8 if is_fp8_cache(config.kv_cache_dtype) else model_dtype


def planned_kv_bytes(config: EngineConfig, device: torch.device) -> int:
    """The arena's bytes as known before the model is built: `--kv-memory`, else the CPU
    default (the budget off CUDA, and the memory check's KV share).

    On CUDA without `--kv-memory` the budget is what `--gpu-memory-utilization` leaves after
    the measured weights and activations, so it cannot overflow the device: counted as 0.
    """
    if config.kv_memory is not None:
        return int(config.kv_memory)
    if device.type == "cuda":
        return 0
    return parse_size_bytes(DEFAULT_CPU_KV_MEMORY)


@dataclass(frozen=True)
class CudaMemoryProfile:
    """What the budget formula needs on CUDA, measured (`kvbench.sizing.kv_budget`)."""

    total_bytes: int  # the device's memory
    weight_bytes: int  # allocated before the prefill: the weights (and anything resident)
    activation_bytes: int  # the prefill's peak above that


def profile_cuda_memory(
    model: LlamaDecoder, device: torch.device, num_tokens: int
) -> CudaMemoryProfile:
    """The device's memory, and the weights and activation peak of one full-size prefill."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    weights = torch.cuda.memory_allocated(device)
    profile_prefill(model, device, num_tokens)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    _, total = torch.cuda.mem_get_info(device)
    torch.cuda.empty_cache()
    return CudaMemoryProfile(int(total), int(weights), int(peak - weights))


def profile_prefill(model: LlamaDecoder, device: torch.device, num_tokens: int) -> torch.Tensor:
    """Logits of one causal prefill of `num_tokens` without a cache: the activation shapes of
    a full-size step (`memory_check.profile_attention_bytes` counts its attention's share).

    Attention goes to SDPA as `[1, heads, T, D]`: its fused kernels (flash, memory-efficient)
    take 4-D input only, and with 3-D input the math kernel would materialise `[heads, T, T]`
    scores, gigabytes at T = 8,192 that no real step allocates, taken off the KV budget.
    """
    ids = torch.zeros(num_tokens, dtype=torch.long, device=device)
    pos = torch.arange(num_tokens, device=device)

    def attend(_layer, q, k, v):  # [T, H, D] in and out
        group = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
            is_causal=True,
        )
        return out[0].transpose(0, 1)

    with torch.inference_mode():
        return model.logits(model(ids, pos, attend)[-1:])
