"""`--defaults vllm` (the commands' default): the values vLLM v1 takes for the options a user
did not give; `--defaults classic` keeps the values the `RunConfig` sections state. Each value,
its source in vLLM and why classic differs: docs/cli.md, "Defaults that differ from vLLM's".
"""

from __future__ import annotations

from typing import Any

from kvbench.build.engine_build import keeps_fp8_cache
from kvbench.config import EngineConfig
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.strategies import STRATEGIES

VLLM = "vllm"
CLASSIC = "classic"
# The name `classic` had while it was the default: still accepted, meaning classic.
FORMER_CLASSIC = "kvbench"
DEFAULTS_CHOICES = (VLLM, CLASSIC, FORMER_CLASSIC)
DEFAULT_DEFAULTS = VLLM  # what `kvbench run`, `simulate` and `sweep` take


def defaults_name(name: str) -> str:
    """`name` as a run records it: the former name of `classic` read as `classic`."""
    return CLASSIC if name == FORMER_CLASSIC else name

# vLLM's `get_batch_defaults` for `vllm serve`: (max_num_batched_tokens, max_num_seqs)
VLLM_BATCH_DEFAULTS = (2048, 256)
VLLM_LARGE_GPU_BATCH_DEFAULTS = (8192, 1024)  # >= 70 GiB and not an A100 (H100, H200, ...)
VLLM_LARGE_GPU_BYTES = 70 * 2**30
VLLM_WATERMARK = 0.0  # `SchedulerConfig.watermark`: no blocks kept back at admission
VLLM_KV_SCALE = 1.0  # `calculate_kv_scales` off: k_scale = v_scale = 1.0
VLLM_UNMEASURED_REQUESTS = 1  # the ready check's one request; `--num-warmups` 0


def vllm_defaults(kind: str, values: dict[str, Any]) -> dict[str, Any]:
    """The `RunOptions` values vLLM v1 would take for a run of `kvbench <kind>` with
    `values` (the command's defaults and what the user gave: the GPU and strategies)."""
    batched, seqs = VLLM_BATCH_DEFAULTS
    if kind == "simulate":
        gpu = get_gpu(values.get("gpu_spec") or values.get("gpu"))
        named = f"{gpu.name} {gpu.description}".lower()
        if gpu.memory_bytes >= VLLM_LARGE_GPU_BYTES and "a100" not in named:
            batched, seqs = VLLM_LARGE_GPU_BATCH_DEFAULTS
    out: dict[str, Any] = {
        "batching": "vllm-v1",
        "strategy": "prefix",
        "chunked_prefill": True,
        "max_num_batched_tokens": batched,
        "max_num_seqs": seqs,
        "watermark": VLLM_WATERMARK,
        "warmup": VLLM_UNMEASURED_REQUESTS,
    }
    if values.get("chunked_prefill") is False:
        # vLLM without chunked prefill: max(max_model_len, 2048), kvbench's own default; and
        # kvbench's `continuous`, since `vllm-v1` always chunks
        del out["max_num_batched_tokens"]
        del out["batching"]
    strategy = values.get("strategy") or out["strategy"]
    names = STRATEGIES.names() if strategy == "all" else [
        s.strip() for s in str(strategy).split(",") if s.strip()]
    kv_dtype = values.get("kv_cache_dtype", "auto")
    if any(keeps_fp8_cache(EngineConfig(strategy=name, kv_cache_dtype=kv_dtype))
           for name in names):
        out["kv_scale"] = VLLM_KV_SCALE  # a scale only an fp8 cache reads
    return out
