"""`ExecutorFactory`: an `EngineConfig` turned into model, arena, strategy, policy and engine.

There is one wiring for every engine: lengths, KV dtype, budget, strategy, policy and `Engine`
are built here; what differs between the real model, the simulator and the transformers
baseline is the factory subclass (where the model's shape, the KV budget, the executor and the
clock come from). `kvbench.build.engines` names the factory of each `EngineKind`.

This module does not import torch, nor any factory: the simulator builds through it without
loading torch (docs/design.md). The real model's factory is `kvbench.build.model_executors`.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbench.config import EngineConfig
from kvbench.core.clock import RunClock
from kvbench.core.executor import DeviceKind, Executor
from kvbench.core.kv_allocation import HybridAllocation, hybrid_allocation
from kvbench.core.kv_cache_dtype import is_fp8_cache
from kvbench.core.kv_groups import kv_bytes_per_token
from kvbench.engine.base_engine import BaseEngine
from kvbench.engine.engine import Engine
from kvbench.engine.group_memory import GroupMemory, GroupShape
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.dtype_names import element_bytes
from kvbench.scheduling import POLICIES, SchedulerLimits, make_policy
from kvbench.sizing.capacity import kv_capacity
from kvbench.strategies import STRATEGIES, make_strategy, reads_option

if TYPE_CHECKING:
    import torch


@dataclass
class BuiltEngine:
    engine: BaseEngine  # `Engine`, or `HFGenerateEngine` for the transformers baseline
    model_config: ModelConfig
    device: torch.device | DeviceKind  # `DeviceKind` where nothing runs (the simulator)
    kv_budget_bytes: int | None  # None: no budget is enforced (transformers' own cache)
    kv_dtype: torch.dtype | str  # torch's name of it where there is no tensor (the simulator)
    bytes_per_slot: int
    backend: str
    max_model_len: int
    # Seconds spent compiling GPU kernels before the run (kept out of TTFT/TPOT); 0 elsewhere.
    compile_s: float = 0.0


def effective_config(config: EngineConfig) -> EngineConfig:
    """Apply a strategy's implied options (`fp8` is `paged` with `--kv-cache-dtype fp8`) and
    a batching policy's (`vllm-v1` always chunks prefills: it has no other mode)."""
    defaults = EngineConfig()
    for name, value in STRATEGIES.get(config.strategy).engine_overrides.items():
        if getattr(config, name) == getattr(defaults, name):  # an explicit choice stays
            setattr(config, name, value)
    for name, value in POLICIES.get(config.batching).engine_overrides.items():
        setattr(config, name, value)
    return config


def keeps_fp8_cache(config: EngineConfig) -> bool:
    """Whether the engine of `config` keeps an fp8 KV cache, once its strategy's implied
    options apply (`fp8`, or any strategy with `--kv-cache-dtype fp8`). `config` is left as
    it is."""
    return is_fp8_cache(effective_config(dataclasses.replace(config)).kv_cache_dtype)


def resolve_lengths(config: EngineConfig, model_config: ModelConfig) -> tuple[int, int]:
    """(max_model_len, max_num_batched_tokens) after defaults, checked against the model."""
    max_model_len = config.max_model_len or model_config.max_position_embeddings
    if max_model_len > model_config.max_position_embeddings:
        raise KvbenchInputError(
            f"--max-model-len {max_model_len} exceeds the model's "
            f"{model_config.max_position_embeddings} positions"
        )
    max_batched = config.max_num_batched_tokens or max(2048, max_model_len)
    if max_batched < max_model_len and not config.chunked_prefill:
        raise KvbenchInputError(
            f"--max-num-batched-tokens {max_batched} is below --max-model-len {max_model_len}: "
            "long prompts could never be scheduled (enable --chunked-prefill or raise it)"
        )
    return max_model_len, max_batched


def check_block_fits_window(config: EngineConfig, model_config: ModelConfig,
                            max_model_len: int) -> None:
    """Refuse a `--block-size` larger than a sliding window shorter than the context, for a
    strategy that pages: such a block holds tokens its window layers never read again, so a
    window group could never free one (vLLM pages a window layer in blocks within its window)."""
    window = model_config.window_shorter_than(max_model_len)
    pages = reads_option(config.strategy, "block_size")
    if window is not None and pages and config.block_size > window:
        raise KvbenchInputError(
            f"--block-size {config.block_size} is larger than {model_config.name}'s "
            f"{window}-token sliding window (its blocks would hold tokens the window layers "
            f"no longer attend to): give --block-size {window} or less"
        )


def arena_slots(budget_bytes: int, bytes_per_slot: int) -> int:
    num_slots = kv_capacity(budget_bytes, bytes_per_slot)
    if num_slots < 1:
        raise KvbenchInputError(
            f"--kv-memory {budget_bytes} bytes holds no token: one token needs "
            f"{bytes_per_slot} bytes"
        )
    return num_slots


def kv_allocation(config: EngineConfig, model_config: ModelConfig,
                  kv_element_bytes: int) -> HybridAllocation | None:
    """The allocation groups of a strategy that keeps a table per layer group (`hybrid`,
    and `contiguous` on a model with sliding-window layers: both read `allocation_windows`);
    None where one table serves every layer."""
    if not reads_option(config.strategy, "allocation_windows"):
        return None
    groups = model_config.kv_groups(kv_element_bytes)
    if reads_option(config.strategy, "reserve") and all(g.window is None for g in groups):
        return None  # contiguous without a window: one range serves every layer
    return hybrid_allocation(groups)


def slot_bytes(model_config: ModelConfig, kv_element_bytes: int,
               allocation: HybridAllocation | None, tensor_parallel_size: int = 1) -> int:
    """Bytes of one arena slot across the tensor-parallel group: one token of every layer,
    or of one allocation group. Each GPU's share x N: the whole K and V once for split
    heads, N copies of a latent-attention row (whole on each GPU)."""
    tp = tensor_parallel_size
    if allocation is not None:  # one GPU's allocation groups, as for one table below
        return tp * hybrid_allocation(model_config.kv_groups(kv_element_bytes, tp)).slot_bytes
    return tp * kv_bytes_per_token(model_config.kv_groups(kv_element_bytes, tp))


def group_memory(model_config: ModelConfig, kv_element_bytes: int,
                 allocation: HybridAllocation | None, bytes_per_slot: int) -> GroupMemory:
    """The per-group memory sums of a run: its allocation groups, or the model's KV groups
    (every one holding the same slots)."""
    if allocation is not None:
        shapes = tuple(GroupShape(g.layers, g.window, allocation.slot_bytes)
                       for g in allocation.groups)
        return GroupMemory(shapes, bytes_per_slot, per_group_splits=True)
    shapes = tuple(GroupShape(g.layers, g.window, g.bytes_per_token)
                   for g in model_config.kv_groups(kv_element_bytes))
    return GroupMemory(shapes, bytes_per_slot, per_group_splits=False)


def strategy_for(config: EngineConfig, num_slots: int, max_model_len: int,
                 allocation: HybridAllocation | None = None,
                 max_num_batched_tokens: int | None = None):
    """The configured strategy over `num_slots`; prefix hashes are keyed by model and dtypes.
    `max_num_batched_tokens` (resolved, `resolve_lengths`) bounds one step's write of a
    sequence under chunked prefill, hence `contiguous`'s window rings."""
    windows = allocation.windows if allocation is not None else (None,)
    return make_strategy(
        config.strategy, num_slots, max_model_len, block_size=config.block_size,
        reserve=config.reserve, watermark=config.watermark,
        namespace=f"{config.model}/{config.dtype}/{config.kv_cache_dtype}",
        allocation_windows=windows, chunked_prefill=config.chunked_prefill,
        max_num_batched_tokens=max_num_batched_tokens or max(2048, max_model_len),
    )


@dataclass(frozen=True)
class BuildContext:
    """What the caller lends a build: the run's clock (None: the factory's own) and a cache of
    loaded models shared between the engines of a session."""

    clock: RunClock | None = None
    model_cache: dict | None = None


class ExecutorFactory(ABC):
    """Where an engine's model side comes from; `build` is the shared wiring.

    A factory answers, in order: the device and model (`load`), the KV budget in bytes
    (`kv_budget_bytes`), the run's clock (`clock`) and the executor over the arena
    (`executor`). An engine that is not kvbench's `Engine` overrides `build` itself.
    """

    def build(self, config: EngineConfig, context: BuildContext) -> BuiltEngine:
        config = effective_config(config)
        device, model, model_config = self.load(config, context)
        max_model_len, max_batched = resolve_lengths(config, model_config)
        check_block_fits_window(config, model_config, max_model_len)
        kv_dtype = self.kv_dtype(config)
        allocation = kv_allocation(config, model_config, element_bytes(kv_dtype))
        bytes_per_slot = slot_bytes(model_config, element_bytes(kv_dtype), allocation,
                                    config.tensor_parallel_size)
        budget = self.kv_budget_bytes(config, device, model, model_config, max_batched)
        num_slots = arena_slots(budget, bytes_per_slot)
        strategy = strategy_for(config, num_slots, max_model_len, allocation, max_batched)
        clock = self.clock(context)
        executor = self.executor(config, model, model_config, device, num_slots, kv_dtype, clock)
        limits = SchedulerLimits(config.max_num_seqs, max_batched, config.chunked_prefill)
        policy = make_policy(config.batching, strategy, limits, config.queue_order)
        engine = Engine(
            strategy, policy, executor, bytes_per_slot=bytes_per_slot,
            max_model_len=max_model_len, temperature=self.temperature(config), seed=config.seed,
            clock=clock, memory_probe=self.memory_probe(device),
            group_memory=group_memory(model_config, element_bytes(kv_dtype), allocation,
                                      bytes_per_slot),
        )
        return BuiltEngine(engine, model_config, device, budget, kv_dtype, bytes_per_slot,
                           self.backend(config, device), max_model_len,
                           self.precompile(config, executor, model_config, device, strategy))

    @abstractmethod
    def load(
        self, config: EngineConfig, context: BuildContext
    ) -> tuple[torch.device | DeviceKind, Any, ModelConfig]:
        """(device, model or None, the model's shape)."""

    @abstractmethod
    def kv_dtype(self, config: EngineConfig) -> torch.dtype | str:
        """The KV cache's dtype as the executor stores it (torch's name when it stores none)."""

    @abstractmethod
    def kv_budget_bytes(
        self, config: EngineConfig, device: torch.device | DeviceKind, model: Any,
        model_config: ModelConfig, max_batched_tokens: int,
    ) -> int:
        """Bytes of the KV arena."""

    @abstractmethod
    def executor(
        self, config: EngineConfig, model: Any, model_config: ModelConfig,
        device: torch.device | DeviceKind, num_slots: int, kv_dtype: torch.dtype | str,
        clock: RunClock | None,
    ) -> Executor:
        """The executor over an arena of `num_slots` KV slots."""

    @abstractmethod
    def backend(self, config: EngineConfig, device: torch.device | DeviceKind) -> str:
        """The attention backend's name, as results record it."""

    def clock(self, context: BuildContext) -> RunClock | None:
        return context.clock

    def temperature(self, config: EngineConfig) -> float:
        return config.temperature

    def memory_probe(self, device: torch.device | DeviceKind) -> Callable[[], dict] | None:
        return None

    def precompile(self, config: EngineConfig, executor: Executor, model_config: ModelConfig,
                   device: torch.device | DeviceKind, strategy: Any) -> float:
        """Compile every kernel variant the run will meet and capture its CUDA graphs (the
        `strategy` tells their layout); the seconds it took."""
        return 0.0
