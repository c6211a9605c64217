"""`ModelExecutors`: the executor factory of the real engine (the Llama model, on torch).

Apart from `kvbench.build.engine_build` (the wiring every engine shares, torch-free) so that a
simulation, which builds through the same wiring, never imports torch or the model.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

from kvbench.build.engine_build import (
    BuildContext,
    EnginePlan,
    EngineShape,
    ExecutorFactory,
    mamba_cache_mode,
)
from kvbench.build.vllm_flags import vllm_flags
from kvbench.config import EngineConfig
from kvbench.errors import KvbenchInputError
from kvbench.execution.device import resolve_device
from kvbench.execution.gpu_memory import GpuMemoryProbe
from kvbench.execution.kv_budget import (
    kv_cache_torch_dtype,
    planned_kv_bytes,
    profile_cuda_memory,
)
from kvbench.execution.model_executor import KVArena, ModelExecutor
from kvbench.kernels.attention_ops import LatentAttentionOps
from kvbench.kernels.attention_shape import AttentionShape
from kvbench.kernels.backend import get_ops, resolve_backend
from kvbench.models.config import ModelConfig
from kvbench.models.dtype_names import element_bytes
from kvbench.models.loader import load_model, parse_dtype
from kvbench.models.memory_check import available_bytes, memory_need
from kvbench.sizing.kv_budget import kv_budget_bytes
from kvbench.sizing.vllm_report import format_beside_measured
from kvbench.sizing.vllm_startup import vllm_startup

# The strategies whose state placement the executor reads and writes: a sequence's running
# state in `layout.state_blocks` (`contiguous`: one-slot blocks at its range's end) and
# nothing else (no checkpoint to restore or take; `prefix`'s are `layout.state_copies`).
ENGINE_STATE_STRATEGIES = ("paged", "fp8", "hybrid", "hybrid-prefix", "contiguous")


def check_engine_state_strategy(config: EngineConfig, model_config: ModelConfig) -> None:
    """Refuse, before the model loads, a hybrid under a strategy whose state placement the
    real engine's executor does not handle yet (`kvbench simulate` runs them all): `prefix`
    runs with `--mamba-cache-mode none` or `align` (`all`'s per-block state pages are never
    written: its checkpoints would hold no state)."""
    if model_config.hybrid is None or config.strategy in ENGINE_STATE_STRATEGIES:
        return
    if config.strategy == "prefix" and mamba_cache_mode(config) in ("none", "align"):
        return
    mode = (f" --mamba-cache-mode {mamba_cache_mode(config)}"
            if config.strategy == "prefix" else "")
    raise KvbenchInputError(
        f"kvbench run of {model_config.name} (a state-space hybrid) under --strategy "
        f"{config.strategy}{mode}: the engine's executor does not place its state there yet; "
        "it runs under --strategy paged, fp8, hybrid, hybrid-prefix, contiguous or prefix "
        "(--mamba-cache-mode none or align) "
        "(kvbench simulate runs every strategy)")


class ModelExecutors(ExecutorFactory):
    """kvbench's engine: the Llama model with the configured attention backend."""

    def load(self, shape: EngineShape, context: BuildContext):
        config = shape.config
        check_engine_state_strategy(config, shape.model_config)
        device = resolve_device(config.device)
        if device.type == "cpu":  # every engine (`--engine hf` too): a comparison's sides
            torch.set_num_threads(config.cpu_threads)  # run on the same number of threads
        # The model from the session's cache when one with the same weights is there.
        key = (config.model, config.dtype, str(device), config.seed)
        cache = context.model_cache if context.model_cache is not None else {}
        if key not in cache:
            dtype = parse_dtype(config.dtype)
            # Checked before a byte is allocated: weights, a full prefill's activations and
            # the arena.
            need = memory_need(shape.model_config, dtype, shape.max_num_batched_tokens,
                               config.max_num_seqs, planned_kv_bytes(config, device))
            cache[key] = load_model(config.model, dtype=dtype, device=device,
                                    seed=config.seed, need=need)
        return device, cache[key][0]

    def kv_dtype(self, config: EngineConfig) -> torch.dtype:
        return kv_cache_torch_dtype(config, parse_dtype(config.dtype))

    def kv_budget(self, config, device, model, model_config, max_batched_tokens):
        """`--kv-memory`; else on CUDA what `--gpu-memory-utilization` leaves of the measured
        memory (as vLLM), elsewhere `DEFAULT_CPU_KV_MEMORY`."""
        if device.type != "cuda" and config.gpu_memory_utilization is not None:
            raise KvbenchInputError("--gpu-memory-utilization needs CUDA; use --kv-memory SIZE")
        if config.kv_memory is not None or device.type != "cuda":
            return planned_kv_bytes(config, device), None
        measured = profile_cuda_memory(model, device, max_batched_tokens)
        budget = kv_budget_bytes(
            measured.total_bytes, config.gpu_memory_utilization, measured.weight_bytes,
            measured.activation_bytes, where=f" on {device}",
            advice="use a higher --gpu-memory-utilization, a lower --max-num-batched-tokens "
            "or a smaller model",
        )
        # What vLLM's start-up model predicts for the same GPU and flags, beside it: where
        # the two part is what the model (and `kvbench simulate`'s budget) gets wrong.
        flags = vllm_flags(config, max_batched_tokens,
                           str(parse_dtype(config.dtype)).removeprefix("torch."))
        predicted = vllm_startup(model_config, measured.total_bytes, flags,
                                 gpu_name=str(device))
        print(format_beside_measured(predicted, measured.total_bytes, measured.weight_bytes,
                                     measured.activation_bytes, budget), file=sys.stderr)
        return budget, None

    def executor(self, plan: EnginePlan, clock) -> ModelExecutor:
        config, model_config, device = plan.shape.config, plan.shape.model_config, plan.device
        backend = self.backend(config, device)
        ops = get_ops(backend)
        if model_config.mla is not None and backend == "triton":
            ops = LatentAttentionOps(ops)  # the MLA decode kernel; prefill on the reference
        arena = KVArena(model_config.kv_groups(element_bytes(plan.kv_dtype)), plan.num_slots,
                        plan.kv_dtype, device, kv_scale=config.kv_scale,
                        allocation=plan.allocation,
                        state_layers=_layers_without_kv(model_config))
        return ModelExecutor(plan.model, arena, ops, device, backend,
                             enforce_eager=config.enforce_eager is not False,
                             max_num_seqs=config.max_num_seqs)

    def check_host_tier_bytes(self, tier_bytes: int) -> None:
        have = available_bytes(torch.device("cpu"))
        if have is not None and tier_bytes > have:
            raise KvbenchInputError(
                f"--kv-offload: {tier_bytes / 2**30:.2f} GiB of host memory for the tier, the "
                f"host has {have / 2**30:.2f} GiB available; give a smaller --kv-offload")

    def backend(self, config: EngineConfig, device: torch.device) -> str:
        return resolve_backend(config.attention_backend, device)

    def memory_probe(self, device: torch.device) -> Callable[[], dict] | None:
        return GpuMemoryProbe(device).sample if device.type == "cuda" else None

    def precompile(self, plan: EnginePlan, executor, strategy) -> float:
        # Triton compiles a variant at its first launch, and a CUDA graph capture synchronizes
        # the device: either inside a measured step would land in its latency.
        config, model_config, device = plan.shape.config, plan.shape.model_config, plan.device
        seconds = 0.0
        if executor.backend_name == "triton" and device.type == "cuda":
            arena = executor.arena
            variants = executor.layer_variants
            mla = model_config.mla
            shape = AttentionShape(
                model_config.num_heads, 1 if mla else model_config.num_kv_heads,
                mla.latent_dim if mla else model_config.head_dim,
                parse_dtype(config.dtype), arena.dtype, config.block_size,
                "scalar" if arena.is_fp8 else "none",
                # the score variants the model's layers launch (each compiled apart)
                window_kinds=tuple(sorted({"sliding_window" in v for v in variants})),
                softcap=any("softcap" in v for v in variants),
                sinks=any("sinks" in v for v in variants),
                kv_lora_rank=mla.kv_lora_rank if mla else None,
            )
            seconds = executor.ops.precompile(shape, device)
        start = time.perf_counter()
        if executor.capture_decode_graphs(strategy.layout_kind, strategy.table_block_size,
                                          plan.shape.max_model_len):
            seconds += time.perf_counter() - start
        return seconds


def _layers_without_kv(model_config) -> tuple[int, ...]:
    """A hybrid's layers that hold no KV: its recurrent layers (their states in the pool's
    blocks) and Nemotron-H's MLP-only layers (nothing)."""
    if model_config.hybrid is None:
        return ()
    attention = set(model_config.hybrid.attention_layers)
    return tuple(i for i in range(model_config.num_layers) if i not in attention)
