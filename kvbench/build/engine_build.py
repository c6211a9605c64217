"""`ExecutorFactory`: an `EngineConfig` turned into model, arena, strategy, policy and engine,
in three steps each derived once (docs/design.md, One build path): `engine_shape`,
`ExecutorFactory.plan`, `ExecutorFactory.build`. The engines differ only by the factory
subclass; `kvbench.build.engines` names the factory of each `EngineKind`.

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
from kvbench.core.mamba_cache_mode import WITH_PREFIX_CACHING, WITHOUT_PREFIX_CACHING
from kvbench.core.request import Request
from kvbench.engine.base_engine import BaseEngine
from kvbench.engine.engine import Engine, RequestCheck, check_request_lengths
from kvbench.engine.group_memory import GroupMemory, GroupShape
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.dtype_names import element_bytes, model_dtype_name
from kvbench.models.resolve_config import resolve_model_config
from kvbench.scheduling import POLICIES, SchedulerLimits, make_policy
from kvbench.sizing.capacity import kv_capacity
from kvbench.sizing.state_pages import checkpoint_alignment, state_pages
from kvbench.strategies import STRATEGIES, make_strategy, reads_option, swaps

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
    kv_budget_terms: dict | None = None  # `EnginePlan.kv_budget_terms`


def effective_config(config: EngineConfig) -> EngineConfig:
    """`config` with a strategy's implied options (`fp8` is `paged` with `--kv-cache-dtype
    fp8`) and a batching policy's (`vllm-v1` always chunks prefills: it has no other mode),
    as a new config: `config` is left as it is."""
    defaults = EngineConfig()
    implied = {name: value
               for name, value in STRATEGIES.get(config.strategy).engine_overrides.items()
               if getattr(config, name) == getattr(defaults, name)}  # an explicit choice stays
    policy = POLICIES.get(config.batching)
    implied.update(policy.engine_overrides)
    models_async = policy.cls.models_async_scheduling
    if config.async_scheduling is None:
        implied["async_scheduling"] = models_async
    elif config.async_scheduling and not models_async:
        raise KvbenchInputError(
            f"--async-scheduling is modelled for --batching vllm-v1 (vLLM v1's scheduler), "
            f"not {config.batching}; give --no-async-scheduling or leave it out")
    return dataclasses.replace(config, **implied)


def keeps_fp8_cache(config: EngineConfig) -> bool:
    """Whether the engine of `config` keeps an fp8 KV cache, once its strategy's implied
    options apply (`fp8`, or any strategy with `--kv-cache-dtype fp8`)."""
    return is_fp8_cache(effective_config(config).kv_cache_dtype)


def check_shape(config: EngineConfig, model_config: ModelConfig, max_model_len: int) -> None:
    """Refuse options that contradict each other or the model."""
    # A block larger than a sliding window shorter than the context holds tokens its window
    # layers never read again, so a window group could never free one (vLLM pages a window
    # layer in blocks within its window).
    window = model_config.window_shorter_than(max_model_len)
    if (window is not None and reads_option(config.strategy, "block_size")
            and config.block_size > window):
        raise KvbenchInputError(
            f"--block-size {config.block_size} is larger than {model_config.name}'s "
            f"{window}-token sliding window (its blocks would hold tokens the window layers "
            f"no longer attend to): give --block-size {window} or less"
        )
    # A host tier goes under a prefix cache; swapping into it needs a strategy that swaps.
    if config.kv_offload is not None and not reads_option(config.strategy, "kv_offload_blocks"):
        raise KvbenchInputError(
            f"--kv-offload puts a host tier under a prefix cache (prefix, hybrid-prefix); --strategy "
            f"{config.strategy} takes none")
    if config.preemption_mode == "swap" and not swaps(config.strategy):
        raise KvbenchInputError(
            f"--preemption-mode swap: --strategy {config.strategy} does not swap into its host "
            "tier (prefix does); give --preemption-mode recompute")
    if model_config.hybrid is None:
        return
    # A state-space hybrid runs under a strategy that holds its recurrent state, in blocks of
    # its pool (`state_blocks`) or slots of its range (`state_slots`); a `--mamba-cache-mode`
    # that keeps state checkpoints needs a prefix cache to keep them in.
    if not (reads_option(config.strategy, "state_blocks")
            or reads_option(config.strategy, "state_slots")):
        raise KvbenchInputError(
            f"--strategy {config.strategy} does not hold {model_config.name}'s recurrent "
            "state: a state-space hybrid runs under contiguous, paged, prefix, hybrid or "
            "hybrid-prefix")
    mode = config.mamba_cache_mode
    if (mode not in (None, WITHOUT_PREFIX_CACHING)
            and not reads_option(config.strategy, "mamba_cache_mode")):
        raise KvbenchInputError(
            f"--mamba-cache-mode {mode} keeps state checkpoints for prefix caching: "
            f"--strategy {config.strategy} keeps none (prefix does; or give "
            f"--mamba-cache-mode {WITHOUT_PREFIX_CACHING})")


def mamba_cache_mode(config: EngineConfig) -> str:
    """The run's `--mamba-cache-mode`: as given, else vLLM's (align with prefix caching)."""
    if config.mamba_cache_mode is not None:
        return config.mamba_cache_mode
    if reads_option(config.strategy, "mamba_cache_mode"):
        return WITH_PREFIX_CACHING
    return WITHOUT_PREFIX_CACHING


def state_placement(config: EngineConfig, model_config: ModelConfig,
                    kv_element_bytes: int) -> tuple[tuple[int, int], int]:
    """A state-space hybrid's state as vLLM pages it (`kvbench.sizing.state_pages`): (block
    size, state blocks a sequence), the attention block raised until a page holds a state and
    the blocks of that many slots (a token of every attention layer) its state groups' pages
    fill; then the slots the state fills unpadded, for a strategy that reserves ranges
    (`contiguous`). ((0, 0), 0) for a model without recurrent layers."""
    if model_config.hybrid is None:
        return (0, 0), 0
    pages = state_pages(model_config, kv_element_bytes,
                        element_bytes(model_dtype_name(config.dtype)),
                        config.tensor_parallel_size, config.block_size,
                        checkpoint_alignment(model_config, mamba_cache_mode(config)))
    block_bytes = pages.block_size * pages.kv_bytes_per_token  # one GPU's, as the pages
    return ((pages.block_size, -(-pages.state_bytes_held // block_bytes)),
            -(-pages.state_bytes_per_sequence // pages.kv_bytes_per_token))


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


def offload_blocks(config: EngineConfig, bytes_per_slot: int) -> int:
    """`--kv-offload`'s bytes in host blocks of the arena's layout (vLLM's `num_chunks`:
    bytes // bytes of one block across the group); 0 without a host tier."""
    if config.kv_offload is None:
        return 0
    block_bytes = bytes_per_slot * config.block_size
    blocks = int(config.kv_offload) // block_bytes
    if blocks < 1:
        raise KvbenchInputError(
            f"--kv-offload {int(config.kv_offload)} bytes holds no block of "
            f"{block_bytes} bytes ({config.block_size} tokens); give at least {block_bytes}")
    return blocks


@dataclass(frozen=True)
class EngineShape:
    """What an engine's configuration says before anything is loaded (torch-free)."""

    config: EngineConfig  # the options with their implied ones (`effective_config`)
    model_config: ModelConfig
    max_model_len: int
    max_num_batched_tokens: int


def engine_shape(config: EngineConfig) -> EngineShape:
    """The options resolved, the model's shape and the lengths, checked against the model."""
    config = effective_config(config)
    model_config = resolve_model_config(config.model)
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
    check_shape(config, model_config, max_model_len)
    return EngineShape(config, model_config, max_model_len, max_batched)


@dataclass(frozen=True)
class EnginePlan:
    """An engine as its factory derived it, before its arena exists: the model loaded, the KV
    dtype, slot bytes and budget (on CUDA, measured). `ExecutorFactory.build` turns it into
    the engine; `request_check` refuses, before then, a request the engine could never run."""

    shape: EngineShape
    device: torch.device | DeviceKind  # `DeviceKind` where nothing runs (the simulator)
    model: Any  # None where there is no model (the simulator)
    kv_dtype: torch.dtype | str  # torch's name of it where there is no tensor (the simulator)
    bytes_per_slot: int
    kv_budget_bytes: int | None  # None: no budget is enforced (transformers' own cache)
    allocation: HybridAllocation | None = None
    num_slots: int = 0
    # The terms that made the budget (vLLM's start-up, as `kvbench estimate --json` carries
    # them) where a model sized it; None where it was given or measured.
    kv_budget_terms: dict | None = None
    # A state-space hybrid's (block size, state blocks a sequence): `state_placement`.
    state: tuple[int, int] = (0, 0)
    state_slots: int = 0  # its state in slots, for a strategy reserving ranges

    def strategy(self):
        """A new cache strategy over the planned arena (bookkeeping only: no tensor); prefix
        hashes are keyed by model and dtypes. The resolved `max_num_batched_tokens` bounds one
        step's write of a sequence under chunked prefill, hence `contiguous`'s window rings."""
        config = self.shape.config
        windows = self.allocation.windows if self.allocation is not None else (None,)
        block_size, state_blocks = self.state
        return make_strategy(
            config.strategy, self.num_slots, self.shape.max_model_len,
            block_size=block_size or config.block_size, state_blocks=state_blocks,
            state_slots=self.state_slots, reserve=config.reserve, watermark=config.watermark,
            namespace=f"{config.model}/{config.dtype}/{config.kv_cache_dtype}",
            allocation_windows=windows, chunked_prefill=config.chunked_prefill,
            max_num_batched_tokens=self.shape.max_num_batched_tokens,
            concurrent_batches=2 if config.async_scheduling else 1,
            kv_offload_blocks=offload_blocks(config, self.bytes_per_slot),
            kv_offload_policy=config.kv_offload_policy,
            mamba_cache_mode=mamba_cache_mode(config),
        )

    def built(self, engine: BaseEngine, backend: str, compile_s: float = 0.0) -> BuiltEngine:
        """`engine`, built from this plan, with what results record of it."""
        return BuiltEngine(engine, self.shape.model_config, self.device, self.kv_budget_bytes,
                           self.kv_dtype, self.bytes_per_slot, backend,
                           self.shape.max_model_len, compile_s, self.kv_budget_terms)

    def request_check(self) -> Callable[[Request], None]:
        """What the built engine's `check_request` will say of a request, from the plan."""
        if self.kv_budget_bytes is None:  # transformers' cache grows as it needs
            return lambda request: check_request_lengths(request, self.shape.max_model_len)
        return RequestCheck(self.strategy(), self.bytes_per_slot, self.shape.max_model_len)


@dataclass(frozen=True)
class BuildContext:
    """What the caller lends a build: the run's clock (None: the factory's own) and a cache of
    loaded models shared between the engines of a session."""

    clock: RunClock | None = None
    model_cache: dict | None = None


class ExecutorFactory(ABC):
    """Where an engine's model side comes from; `plan` and `build` are the shared wiring.

    A factory answers, in order: the device and model (`load`), the KV dtype and budget in
    bytes (`kv_dtype`, `kv_budget`), then, when the engine is built, the run's clock
    (`clock`) and the executor over the arena (`executor`). An engine that is not kvbench's
    `Engine` overrides `plan` and `build` itself.
    """

    def plan(self, shape: EngineShape, context: BuildContext) -> EnginePlan:
        config, model_config = shape.config, shape.model_config
        device, model = self.load(shape, context)
        kv_dtype = self.kv_dtype(config)
        kv_element = element_bytes(kv_dtype)
        allocation = kv_allocation(config, model_config, kv_element)
        bytes_per_slot = slot_bytes(model_config, kv_element, allocation,
                                    config.tensor_parallel_size)
        budget, terms = self.kv_budget(config, device, model, model_config,
                                       shape.max_num_batched_tokens)
        if config.kv_offload is not None:
            self.check_host_tier_bytes(
                offload_blocks(config, bytes_per_slot) * bytes_per_slot * config.block_size)
        num_slots = kv_capacity(budget, bytes_per_slot)
        if num_slots < 1:
            raise KvbenchInputError(f"--kv-memory {budget} bytes holds no token: one token "
                                    f"needs {bytes_per_slot} bytes")
        state, state_slots = state_placement(config, model_config, kv_element)
        return EnginePlan(shape, device, model, kv_dtype, bytes_per_slot, budget, allocation,
                          num_slots, terms, state, state_slots)

    def check_host_tier_bytes(self, tier_bytes: int) -> None:
        """Refuse, at planning (before any results folder exists), a `--kv-offload` tier of
        `tier_bytes` the host cannot hold; a modelled tier takes no memory: nothing to check."""
        return None

    def build(self, plan: EnginePlan, context: BuildContext) -> BuiltEngine:
        shape = plan.shape
        config, model_config = shape.config, shape.model_config
        strategy = plan.strategy()
        clock = self.clock(context)
        executor = self.executor(plan, clock)
        if strategy.host_tier is not None:  # the tier's blocks, for the executor to copy
            executor.keep_host_tier(strategy.host_tier.tier.num_blocks, config.block_size,
                                    plan.bytes_per_slot * config.block_size)
        limits = SchedulerLimits(config.max_num_seqs, shape.max_num_batched_tokens,
                                 config.chunked_prefill, config.preemption_mode)
        policy = make_policy(config.batching, strategy, limits, config.queue_order)
        engine = Engine(
            strategy, policy, executor, bytes_per_slot=plan.bytes_per_slot,
            max_model_len=shape.max_model_len, temperature=self.temperature(config),
            seed=config.seed, clock=clock, memory_probe=self.memory_probe(plan.device),
            async_scheduling=bool(config.async_scheduling),
            group_memory=group_memory(model_config, element_bytes(plan.kv_dtype),
                                      plan.allocation, plan.bytes_per_slot),
        )
        return plan.built(engine, self.backend(config, plan.device),
                          self.precompile(plan, executor, strategy))

    @abstractmethod
    def load(
        self, shape: EngineShape, context: BuildContext
    ) -> tuple[torch.device | DeviceKind, Any]:
        """(device, model or None)."""

    @abstractmethod
    def kv_dtype(self, config: EngineConfig) -> torch.dtype | str:
        """The KV cache's dtype as the executor stores it (torch's name when it stores none)."""

    @abstractmethod
    def kv_budget(
        self, config: EngineConfig, device: torch.device | DeviceKind, model: Any,
        model_config: ModelConfig, max_batched_tokens: int,
    ) -> tuple[int, dict | None]:
        """Bytes of the KV arena, and the terms that made them where a model sized them
        (`EnginePlan.kv_budget_terms`; None where given or measured)."""

    @abstractmethod
    def executor(self, plan: EnginePlan, clock: RunClock | None) -> Executor:
        """The executor over the plan's arena (`num_slots` KV slots of `kv_dtype`, laid out
        in its `allocation` groups)."""

    @abstractmethod
    def backend(self, config: EngineConfig, device: torch.device | DeviceKind) -> str:
        """The attention backend's name, as results record it."""

    def clock(self, context: BuildContext) -> RunClock | None:
        return context.clock

    def temperature(self, config: EngineConfig) -> float:
        return config.temperature

    def memory_probe(self, device: torch.device | DeviceKind) -> Callable[[], dict] | None:
        return None

    def precompile(self, plan: EnginePlan, executor: Executor, strategy: Any) -> float:
        """Compile every kernel variant the run will meet and capture its CUDA graphs (the
        `strategy` tells their layout); the seconds it took."""
        return 0.0
