"""`build_engine`: an `EngineConfig` turned into model, arena, strategy, policy and engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvbench.config import EngineConfig
from kvbench.core.engine import Engine
from kvbench.errors import KvbenchInputError
from kvbench.execution.device import resolve_device
from kvbench.execution.gpu_memory import GpuMemoryProbe
from kvbench.execution.kv_budget import (
    kv_cache_torch_dtype,
    kv_element_bytes,
    planned_kv_bytes,
    resolve_kv_budget_bytes,
)
from kvbench.execution.memory_check import memory_need
from kvbench.execution.model_executor import KVArena, ModelExecutor
from kvbench.kernels.backend import get_ops, resolve_backend
from kvbench.models.config import ModelConfig
from kvbench.models.llama import LlamaDecoder
from kvbench.models.loader import load_model, parse_dtype, resolve_model_config
from kvbench.scheduling import SchedulerLimits, make_policy
from kvbench.strategies import make_strategy, strategy_info


@dataclass
class BuiltEngine:
    engine: Engine
    model_config: ModelConfig
    device: torch.device
    kv_budget_bytes: int
    kv_dtype: torch.dtype
    bytes_per_slot: int
    backend: str
    max_model_len: int


def effective_config(config: EngineConfig) -> EngineConfig:
    """Apply a strategy's implied options (`fp8` is `paged` with `--kv-cache-dtype fp8`)."""
    info = strategy_info(config.strategy)
    if info.kv_cache_dtype and config.kv_cache_dtype == "auto":
        config.kv_cache_dtype = info.kv_cache_dtype
    return config


def resolve_lengths(config: EngineConfig, model_config: ModelConfig) -> tuple[int, int]:
    """(max_model_len, max_num_batched_tokens) after defaults, checked against the model."""
    max_model_len = config.max_model_len or model_config.max_position_embeddings
    if max_model_len > model_config.max_position_embeddings:
        raise KvbenchInputError(
            f"--max-model-len {max_model_len} exceeds the model's "
            f"{model_config.max_position_embeddings} positions"
        )
    model_config.check_context(max_model_len)
    max_batched = config.max_num_batched_tokens or max(2048, max_model_len)
    if max_batched < max_model_len and not config.chunked_prefill:
        raise KvbenchInputError(
            f"--max-num-batched-tokens {max_batched} is below --max-model-len {max_model_len}: "
            "long prompts could never be scheduled (enable --chunked-prefill or raise it)"
        )
    return max_model_len, max_batched


def arena_slots(budget_bytes: int, bytes_per_slot: int) -> int:
    num_slots = budget_bytes // bytes_per_slot
    if num_slots < 1:
        raise KvbenchInputError(
            f"--kv-memory {budget_bytes} bytes holds no token: one token needs "
            f"{bytes_per_slot} bytes"
        )
    return num_slots


def strategy_for(config: EngineConfig, num_slots: int, max_model_len: int):
    """The configured strategy over `num_slots`; prefix hashes are keyed by model and dtypes."""
    return make_strategy(
        config.strategy, num_slots, max_model_len, block_size=config.block_size,
        reserve=config.reserve, watermark=config.watermark,
        namespace=f"{config.model}/{config.dtype}/{config.kv_cache_dtype}",
    )


def prepare_device(config: EngineConfig) -> torch.device:
    """The run's device; on the CPU, torch limited to `config.cpu_threads` threads.

    Every engine (kvbench's and `--engine hf`) goes through here, so a comparison runs each
    side on the same number of threads.
    """
    device = resolve_device(config.device)
    if device.type == "cpu":
        torch.set_num_threads(config.cpu_threads)
    return device


def load_cached_model(
    config: EngineConfig, dtype: torch.dtype, device: torch.device, model_cache: dict | None
) -> tuple[LlamaDecoder, ModelConfig]:
    """The run's model, taken from `model_cache` when one with the same weights is there."""
    key = (config.model, config.dtype, str(device), config.seed)
    if model_cache is not None and key in model_cache:
        return model_cache[key]
    # Checked before a byte is allocated: weights, a full prefill's activations and the arena.
    model_config = resolve_model_config(config.model)
    _, max_batched = resolve_lengths(config, model_config)
    need = memory_need(model_config, dtype, max_batched, config.max_num_seqs,
                       planned_kv_bytes(config, device))
    loaded = load_model(config.model, dtype=dtype, device=device, seed=config.seed, need=need)
    if model_cache is not None:
        model_cache[key] = loaded
    return loaded


def build_engine(
    config: EngineConfig,
    clock: Callable[[], float] | None = None,
    model_cache: dict | None = None,
) -> BuiltEngine:
    config = effective_config(config)
    device = prepare_device(config)
    dtype = parse_dtype(config.dtype)
    model, model_config = load_cached_model(config, dtype, device, model_cache)
    max_model_len, max_batched = resolve_lengths(config, model_config)
    kv_dtype = kv_cache_torch_dtype(config, dtype)
    bytes_per_slot = model_config.kv_bytes_per_token(kv_element_bytes(kv_dtype))
    budget = resolve_kv_budget_bytes(config, device, model, max_batched)
    num_slots = arena_slots(budget, bytes_per_slot)
    strategy = strategy_for(config, num_slots, max_model_len)
    backend = resolve_backend(config.attention_backend, device)
    arena = KVArena(model_config, num_slots, kv_dtype, device, kv_scale=config.kv_scale)
    executor = ModelExecutor(model, arena, get_ops(backend), device, backend)
    limits = SchedulerLimits(config.max_num_seqs, max_batched, config.chunked_prefill)
    policy = make_policy(config.batching, strategy, limits)
    engine = Engine(
        strategy, policy, executor, bytes_per_slot=bytes_per_slot, max_model_len=max_model_len,
        temperature=config.temperature, seed=config.seed, clock=clock,
        memory_probe=GpuMemoryProbe(device).sample if device.type == "cuda" else None,
    )
    return BuiltEngine(engine, model_config, device, budget, kv_dtype, bytes_per_slot, backend,
                       max_model_len)
