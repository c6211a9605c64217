"""KV-cache sizing arithmetic behind `kvbench estimate`: exact integer bytes, no tensors.

docs/estimate.md gives every formula (The formulas, Sliding windows, State-space hybrids):
bytes per token summed over the model's KV groups (`kvbench.core.kv_groups`), per request
over the context, the budget (vLLM's pool, `kvbench.sizing.vllm_startup`; floor(GPU memory x
utilization) - weights; or `--kv-memory`), and each strategy's requests in it. Utilizations
are exact fractions (`0.92` is 23/25), so every byte count is an exact integer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from fractions import Fraction
from typing import Any

from kvbench.core.block_size import DEFAULT_BLOCK_SIZE, check_block_size
from kvbench.core.kv_allocation import HybridAllocation, hybrid_allocation
from kvbench.core.kv_groups import KVGroup, full_attention_group, kv_bytes_per_token
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.sizes import (
    DTYPE_BYTES,
    WEIGHT_DTYPES,
    canonical_dtype,
)
from kvbench.simulator.gpus import GPUSpec
from kvbench.sizing.capacity import kv_capacity, sequence_slots
from kvbench.sizing.group_sizes import GROUP_TABLE_HEADER, GroupSize, group_rows, group_sizes
from kvbench.sizing.kv_budget import (
    Utilization,
    check_kv_memory,
    gpu_memory_utilization,
    kv_budget_bytes,
    parse_fraction,
)
from kvbench.sizing.loaded_weights import WeightQuantization
from kvbench.sizing.state_pages import StatePages, state_pages, state_pages_rows
from kvbench.sizing.vllm_report import format_vllm_startup
from kvbench.sizing.vllm_startup import VllmFlags, VllmStartup, vllm_startup
from kvbench.strategies.window_ring import ring_slots
from kvbench.units import format_bytes


def round_up_to_blocks(tokens: int, block_size: int) -> int:
    """Tokens held by whole blocks: 1000 tokens in blocks of 16 hold 1008 slots."""
    return -(-tokens // block_size) * block_size


@dataclass(frozen=True)
class UtilizationComparison:
    """The same KV bytes at two KV utilizations (share of held KV memory that holds real tokens)."""

    kv_bytes: int
    utilization_from: Fraction
    utilization_to: Fraction
    effective_bytes_from: int
    effective_bytes_to: int
    tokens_from: int | None  # None when bytes per token is unknown
    tokens_to: int | None
    capacity_gain: Fraction  # utilization_to / utilization_from

    def to_dict(self) -> dict[str, Any]:
        return {
            "kv_bytes": self.kv_bytes,
            "from": {
                "kv_utilization": float(self.utilization_from),
                "effective_bytes": self.effective_bytes_from,
                "tokens": self.tokens_from,
            },
            "to": {
                "kv_utilization": float(self.utilization_to),
                "effective_bytes": self.effective_bytes_to,
                "tokens": self.tokens_to,
            },
            "capacity_gain": float(self.capacity_gain),
        }


def compare_kv_utilization(
    kv_bytes: int,
    utilization_from: Fraction | float | str,
    utilization_to: Fraction | float | str,
    bytes_per_token: int | None = None,
) -> UtilizationComparison:
    """How many times more KV state fits when the same bytes are used at a higher utilization.

    60 GiB used at 40% holds 24 GiB of tokens, at 90% 54 GiB: a 2.25x capacity gain.
    """
    u_from = parse_fraction(utilization_from, "KV utilization")
    u_to = parse_fraction(utilization_to, "KV utilization")
    eff_from, eff_to = math.floor(kv_bytes * u_from), math.floor(kv_bytes * u_to)
    return UtilizationComparison(
        kv_bytes, u_from, u_to, eff_from, eff_to,
        tokens_from=eff_from // bytes_per_token if bytes_per_token else None,
        tokens_to=eff_to // bytes_per_token if bytes_per_token else None,
        capacity_gain=u_to / u_from)


@dataclass(frozen=True)
class StrategyFit:
    """How many requests one strategy admits into the KV budget."""

    strategy: str  # "contiguous" | "contiguous-rings" | "paged" | "hybrid"
    reserve: str  # what a request reserves, in words
    tokens_per_request: int  # KV slots held by one request
    bytes_per_request: int
    max_concurrency: int | None  # None without a budget
    block_size: int | None = None  # paged only
    blocks_per_request: int | None = None
    num_blocks: int | None = None  # blocks in the budget

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "strategy"}


@dataclass(frozen=True)
class MHAEquivalent:
    """A latent-attention model's budget if it cached full K and V per head instead."""

    kv_bytes_per_token: int  # one GPU's: layers x heads / N x (qk head dim + v head dim) x B
    kv_capacity_tokens: int | None
    max_concurrency: int | None  # requests of tokens_per_request

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class KVEstimate:
    """Every figure of one estimate; byte counts are exact integers. `to_dict` writes the
    fields in this order, under their metadata's "json" key where they have one (None: left
    out)."""

    tensor_parallel_size: int = 1
    model: str | None
    num_layers: int
    num_kv_heads: int
    head_dim: int
    kv_cache_dtype: str
    kv_element_bytes: int
    context: int
    concurrency: int
    block_size: int | None  # rounding of the per-request figure; None: no rounding
    tokens_per_request: int  # context, rounded up to blocks when block_size is set
    kv_bytes_per_token: int
    # One sequence's KV at `context` per group, window layers capped at W (`group_sizes`).
    kv_group_sizes: tuple[GroupSize, ...] = field(default=(), metadata={"json": "kv_groups"})
    kv_bytes_per_request: int
    kv_bytes_total: int
    # The budget (None when neither GPU memory nor a KV size was given).
    gpu_memory_bytes: int | None
    gpu_memory_utilization: Fraction | None
    dtype: str | None  # weights dtype, when the weights were computed
    num_parameters: int | None
    # Parameters one token computes with: a mixture of experts' top-k experts, not all of them
    # (`num_parameters` for a dense model). None where `num_parameters` is.
    active_parameters: int | None = None
    weights_bytes: int | None
    weights_bytes_per_gpu: int | None = None  # weights_bytes when tensor_parallel_size is 1
    weights_source: str | None  # "given" | "computed" | None
    kv_budget_bytes: int | None
    kv_budget_source: str | None  # "vllm" | "gpu" | "given" | None
    kv_capacity_tokens: int | None
    max_concurrency: int | None
    fits: bool | None  # kv_bytes_total <= kv_budget_bytes
    max_model_len: int
    mean_len: int
    strategies: dict[str, StrategyFit] = field(default_factory=dict)
    kv_utilization_comparison: UtilizationComparison | None = None
    mha_equivalent: MHAEquivalent | None = None
    # The vLLM start-up the budget came from (a model on --gpu / --gpu-memory), term by term.
    vllm: VllmStartup | None = None
    # A state-space hybrid's unified pages (None for a model without recurrent layers).
    state_pages: StatePages | None = None
    # what kv_bytes_per_token sums
    kv_groups: tuple[KVGroup, ...] = field(default=(), metadata={"json": None})
    # how the checkpoint stores its weights, in words
    vllm_quantization: str = field(default="float weights", metadata={"json": None})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (fractions as floats)."""
        return {f.metadata.get("json", f.name): _plain(getattr(self, f.name))
                for f in fields(self) if f.metadata.get("json", f.name) is not None}


def _plain(value: Any) -> Any:
    """`value` as JSON holds it: fractions as floats, records by their `to_dict`."""
    if isinstance(value, Fraction):
        return float(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value.to_dict() if hasattr(value, "to_dict") else value


@dataclass(frozen=True)
class EstimateInputs:
    """What `kvbench estimate` is asked (its options: docs/estimate.md); every figure of the
    `KVEstimate` follows from it. The KV shape is `model`'s or the explicit `num_layers` /
    `num_kv_heads` / `head_dim`; None leaves a figure to the CLI's default (`max_model_len`
    the model's max_position_embeddings or `context`, `context` max_model_len, `mean_len`
    context; `block_size` None: no rounding, paged in blocks of 16)."""

    model: ModelConfig | None = None
    num_layers: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "bf16"
    context: int | None = None
    concurrency: int = 1
    block_size: int | None = None
    gpu_memory: int | None = None
    gpu_memory_utilization: Utilization | None = None
    weights_memory: int | None = None
    kv_memory: int | None = None
    max_model_len: int | None = None
    mean_len: int | None = None
    compare_utilization: tuple[Any, Any] | None = None
    tensor_parallel_size: int = 1
    # vLLM's start-up (with a model and --gpu or --gpu-memory): the GPU preset, the
    # checkpoint's weight storage and the flags vLLM's memory profile depends on.
    gpu: GPUSpec | None = None
    quantization: WeightQuantization | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    pipeline_parallel_size: int = 1
    vllm_version: str | None = None


class VllmRefusal(KvbenchInputError):
    """vLLM would not start with these flags (its reason, in one line)."""


@dataclass(frozen=True)
class _KVShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str  # the weights', canonical
    kv_dtype: str  # canonical
    groups: tuple[KVGroup, ...]
    pages: StatePages | None = None  # a hybrid's


@dataclass(frozen=True)
class _Lengths:
    context: int
    max_model_len: int
    mean_len: int


@dataclass(frozen=True)
class _Budget:
    """The KV budget and where it came from (all None when no budget was asked for)."""

    kv_budget_bytes: int | None = None
    source: str | None = None  # "vllm" | "gpu" | "given"
    utilization: Fraction | None = None
    weights_bytes: int | None = None
    weights_source: str | None = None  # "given" | "computed"
    num_parameters: int | None = None
    active_parameters: int | None = None
    weights_bytes_per_gpu: int | None = None
    weights_dtype: str | None = None
    vllm: VllmStartup | None = None


def estimate_kv(inputs: EstimateInputs) -> KVEstimate:
    """Size the KV cache `inputs` describe: per token, request and in total, against a budget."""
    shape = _kv_shape(inputs)
    lengths = _lengths(inputs)
    per_token = kv_bytes_per_token(shape.groups)
    block_size = inputs.block_size
    tokens_per_request = (round_up_to_blocks(lengths.context, block_size) if block_size
                          else lengths.context)
    pages = shape.pages
    per_request = per_token * tokens_per_request + (
        pages.state_bytes_per_sequence if pages else 0)
    total = per_request * inputs.concurrency
    budget = _budget(inputs, shape, lengths, per_token)
    kv = budget.kv_budget_bytes
    mha = _mha_equivalent(inputs, shape, tokens_per_request, kv)
    capacity = concurrency = None
    if kv is not None:
        capacity, concurrency = kv_capacity(kv, per_token), kv_capacity(
            kv, per_token, tokens_per_request)
        if pages is not None:  # vLLM's blocks: attention blocks alone, and whole requests
            capacity = kv // pages.block_bytes // pages.attention_groups * pages.block_size
            concurrency = pages.max_requests(kv, tokens_per_request)
    return KVEstimate(
        model=inputs.model.name if inputs.model is not None else None,
        num_layers=shape.num_layers, num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
        kv_cache_dtype=shape.kv_dtype, kv_element_bytes=DTYPE_BYTES[shape.kv_dtype],
        context=lengths.context, concurrency=inputs.concurrency, block_size=block_size,
        tokens_per_request=tokens_per_request, kv_bytes_per_token=per_token,
        kv_bytes_per_request=per_request, kv_bytes_total=total,
        gpu_memory_bytes=inputs.gpu_memory if inputs.kv_memory is None else None,
        gpu_memory_utilization=budget.utilization,
        dtype=budget.weights_dtype if budget.weights_source == "computed" else None,
        num_parameters=budget.num_parameters, active_parameters=budget.active_parameters,
        weights_bytes=budget.weights_bytes, weights_source=budget.weights_source,
        kv_budget_bytes=kv, kv_budget_source=budget.source,
        kv_capacity_tokens=capacity, max_concurrency=concurrency,
        fits=total <= kv if kv is not None else None,
        max_model_len=lengths.max_model_len, mean_len=lengths.mean_len,
        strategies=(_state_fits(pages, lengths.mean_len, kv) if pages is not None
                    else _strategy_fits(per_token, lengths, block_size, kv, shape.groups)),
        kv_utilization_comparison=_comparison(inputs.compare_utilization, kv, per_token),
        kv_groups=shape.groups,
        tensor_parallel_size=inputs.tensor_parallel_size,
        weights_bytes_per_gpu=budget.weights_bytes_per_gpu,
        mha_equivalent=mha,
        kv_group_sizes=group_sizes(shape.groups, lengths.context),
        vllm=budget.vllm,
        vllm_quantization=(inputs.quantization.describe() if inputs.quantization
                           else f"{budget.weights_dtype} weights"),
        state_pages=pages,
    )


def _kv_shape(inputs: EstimateInputs) -> _KVShape:
    """The model's KV groups, or one full-attention group of the explicit shapes."""
    model = inputs.model
    shapes = (inputs.num_layers, inputs.num_kv_heads, inputs.head_dim)
    if model is not None:
        if any(s is not None for s in shapes):
            raise KvbenchInputError("give either a model or --layers/--kv-heads/--head-dim, "
                                    "not both")
        num_layers, num_kv_heads, head_dim = model.num_layers, model.num_kv_heads, model.head_dim
        if model.mla is not None:  # one latent + rope 'head'
            num_kv_heads, head_dim = 1, model.mla.latent_dim
    elif any(s is None for s in shapes):
        raise KvbenchInputError(
            "give a model (--model PRESET or a folder with config.json) "
            "or all of --layers, --kv-heads and --head-dim"
        )
    else:
        num_layers, num_kv_heads, head_dim = shapes
    _positive(num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim)

    dtype = canonical_dtype(inputs.dtype, WEIGHT_DTYPES)
    kv_dtype = (dtype if str(inputs.kv_cache_dtype).lower() == "auto"
                else canonical_dtype(inputs.kv_cache_dtype))
    elem = DTYPE_BYTES[kv_dtype]
    tp = inputs.tensor_parallel_size
    if tp != 1 and model is None:
        raise KvbenchInputError("--tensor-parallel-size needs --model (a preset or a folder)")
    groups = (model.kv_groups(elem, tp) if model is not None
              else (full_attention_group(num_layers, num_kv_heads, head_dim, elem),))
    pages = None
    if model is not None and model.hybrid is not None:  # the state in the model's dtype
        pages = state_pages(model, elem, DTYPE_BYTES[dtype], tp,
                            inputs.block_size or DEFAULT_BLOCK_SIZE)
    return _KVShape(num_layers, num_kv_heads, head_dim, dtype, kv_dtype, groups, pages)


def _lengths(inputs: EstimateInputs) -> _Lengths:
    """Context, max model length and mean length after their defaults, checked."""
    model, context, max_model_len = inputs.model, inputs.context, inputs.max_model_len
    if max_model_len is None:
        max_model_len = model.max_position_embeddings if model is not None else context
    if context is None:
        context = max_model_len
    if context is None or max_model_len is None:
        raise KvbenchInputError("give --context (tokens per request) or --max-model-len")
    mean_len = context if inputs.mean_len is None else inputs.mean_len
    _positive(context=context, concurrency=inputs.concurrency, max_model_len=max_model_len,
              mean_len=mean_len)
    if inputs.block_size is not None:
        check_block_size(inputs.block_size)  # as `kvbench run` refuses it
    for what, tokens in (("--context", context), ("--mean-len", mean_len)):
        if tokens > max_model_len:
            raise KvbenchInputError(f"{what} {tokens} exceeds the max model length "
                                    f"{max_model_len} (raise --max-model-len)")
    return _Lengths(context, max_model_len, mean_len)


def _budget(inputs: EstimateInputs, shape: _KVShape, lengths: _Lengths,
            per_token: int) -> _Budget:
    """`--kv-memory`, or the pool vLLM would allocate on `--gpu` / `--gpu-memory` (explicit
    shapes: what `--gpu-memory` leaves next to the weights), or no budget."""
    gpu_memory, weights_memory, kv_memory = inputs.gpu_memory, inputs.weights_memory, \
        inputs.kv_memory
    if gpu_memory is None and inputs.gpu is not None and kv_memory is None:
        gpu_memory = inputs.gpu.reported_memory_bytes
    if inputs.pipeline_parallel_size != 1 and (inputs.model is None or gpu_memory is None):
        raise KvbenchInputError("--pipeline-parallel-size needs --model and --gpu (or "
                                "--gpu-memory)")
    if gpu_memory is None and inputs.gpu_memory_utilization is not None:
        raise KvbenchInputError("--gpu-memory-utilization needs --gpu-memory")
    if kv_memory is not None:
        if gpu_memory is not None or weights_memory is not None:
            raise KvbenchInputError("--kv-memory is the KV budget itself: give it or "
                                    "--gpu-memory/--weights-memory, not both")
        _positive(kv_memory=kv_memory)
        if inputs.gpu is not None:
            check_kv_memory(kv_memory, inputs.gpu.reported_memory_bytes, inputs.gpu.name,
                            inputs.tensor_parallel_size * inputs.pipeline_parallel_size)
        return _Budget(kv_memory, "given")
    if gpu_memory is None:
        if weights_memory is not None:
            raise KvbenchInputError("--weights-memory needs --gpu-memory")
        return _Budget()
    if inputs.model is not None:
        return _vllm_budget(inputs, shape, lengths, per_token, gpu_memory)
    util = gpu_memory_utilization(inputs.gpu_memory_utilization)
    if weights_memory is None:
        raise KvbenchInputError("give --weights-memory: weights cannot be computed from "
                                "explicit --layers/--kv-heads/--head-dim (or give --model)")
    budget = kv_budget_bytes(
        gpu_memory, util, weights_memory,
        advice="use more --gpu-memory, a higher --gpu-memory-utilization or a smaller --dtype")
    return _Budget(budget, "gpu", util, weights_memory, "given")


def _vllm_budget(inputs: EstimateInputs, shape: _KVShape, lengths: _Lengths, per_token: int,
                 gpu_memory: int) -> _Budget:
    """The pool vLLM would allocate: its tokens at `per_token` (one GPU's share, every layer)
    are the budget; vLLM's refusal to start is raised as `VllmRefusal`."""
    model, quantization = inputs.model, inputs.quantization
    startup = vllm_startup(model, gpu_memory, VllmFlags(
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        max_model_len=lengths.max_model_len, max_num_seqs=inputs.max_num_seqs,
        max_num_batched_tokens=inputs.max_num_batched_tokens,
        block_size=inputs.block_size or DEFAULT_BLOCK_SIZE, kv_cache_dtype=shape.kv_dtype,
        dtype=shape.dtype, quantization=inputs.quantization, enforce_eager=inputs.enforce_eager,
        tensor_parallel_size=inputs.tensor_parallel_size,
        pipeline_parallel_size=inputs.pipeline_parallel_size,
        weights_memory=inputs.weights_memory, vllm_version=inputs.vllm_version,
    ), gpu_name=inputs.gpu.description if inputs.gpu is not None else "",
        memory_source="the datasheet's: CUDA reports a little less" if (
            inputs.gpu_memory is None and inputs.gpu is not None
            and inputs.gpu.cuda_memory_bytes is None) else "as CUDA reports it")
    if startup.pool is None:
        raise VllmRefusal(startup.refusal or "vLLM would not start")
    per_gpu = startup.stages[0].weights
    weights = sum(stage.weights for stage in startup.stages) * inputs.tensor_parallel_size
    pool = startup.pool
    kv = (pool.num_blocks * pool.block_bytes if shape.pages is not None
          else pool.tokens * per_token)
    return _Budget(kv, "vllm", startup.utilization, weights,
                   "given" if inputs.weights_memory is not None else "computed",
                   model.num_parameters(), model.num_active_parameters(), per_gpu,
                   quantization.scheme if quantization and not quantization.experts_only
                   else shape.dtype, startup)


def _mha_equivalent(inputs: EstimateInputs, shape: _KVShape, tokens_per_request: int,
                    budget: int | None) -> MHAEquivalent | None:
    """What the latent saves: full K (qk_nope + qk_rope) and V (v_head_dim) per head."""
    model = inputs.model
    if model is None or model.mla is None:
        return None
    mla, tp = model.mla, inputs.tensor_parallel_size
    per_token = (model.num_layers * (model.num_heads // tp)
                 * (mla.qk_head_dim + mla.v_head_dim) * DTYPE_BYTES[shape.kv_dtype])
    return MHAEquivalent(per_token, _capacity(budget, per_token),
                         _capacity(budget, per_token, tokens_per_request))


def _strategy_fits(
    per_token: int, lengths: _Lengths, block_size: int | None, budget: int | None,
    groups: tuple[KVGroup, ...] = (),
) -> dict[str, StrategyFit]:
    """Requests each strategy admits into `budget`: contiguous at max, paged at mean length,
    and for a model with sliding-window layers hybrid at mean length (`sequence_slots`)."""
    max_model_len, mean_len = lengths.max_model_len, lengths.mean_len
    paged_block = block_size or DEFAULT_BLOCK_SIZE
    blocks_per_request = -(-mean_len // paged_block)
    paged_tokens = blocks_per_request * paged_block

    fits = {
        "contiguous": StrategyFit("contiguous", f"max: max_model_len = {max_model_len} tokens",
                                  max_model_len, per_token * max_model_len,
                                  _capacity(budget, per_token, max_model_len)),
        "paged": StrategyFit(
            "paged", f"ceil({mean_len} / {paged_block}) = {blocks_per_request} blocks at mean "
            "length", paged_tokens, per_token * paged_tokens,
            _capacity(budget, per_token, paged_tokens), block_size=paged_block,
            blocks_per_request=blocks_per_request,
            num_blocks=_capacity(budget, per_token, paged_block)),
    }
    if any(group.attention == "sliding" for group in groups):
        fits["contiguous-rings"] = _contiguous_rings_fit(groups, max_model_len, budget)
        fits["hybrid"] = _hybrid_fit(groups, mean_len, paged_block, budget)
    return fits


def _state_fits(pages: StatePages, mean_len: int, budget: int | None) -> dict[str, StrategyFit]:
    """A hybrid's `paged`, as vLLM holds a request: its attention blocks of the raised block
    size and one block per state group, from admission to finish."""
    blocks = pages.blocks_per_request(mean_len)
    attention = pages.attention_groups * -(-mean_len // pages.block_size)
    reserve = (f"{attention} attention block(s) at mean length + {pages.state_groups} state "
               f"block(s), blocks of {pages.block_bytes:,} B")
    return {"paged": StrategyFit(
        "paged", reserve, attention * pages.block_size, blocks * pages.block_bytes,
        pages.max_requests(budget, mean_len) if budget is not None else None,
        block_size=pages.block_size, blocks_per_request=blocks,
        num_blocks=_capacity(budget, pages.block_bytes))}


# The chunk bound the ring row assumes: the floor of kvbench's step budget (its default is
# max(2048, max_model_len), under which a long-context model's rings stay near whole).
RING_CHUNK_TOKENS = 2048


def _contiguous_rings_fit(groups: tuple[KVGroup, ...], max_model_len: int,
                          budget: int | None) -> StrategyFit:
    """`contiguous` (reserve max) on a windowed model under chunked prefill in chunks of at
    most `RING_CHUNK_TOKENS`: each full-attention allocation group reserves max_model_len
    slots, each window group a ring of min(max_model_len, W - 1 + chunk) (`ring_slots` for
    the longest prompt; a prompt written whole needs max(prompt, W) instead, up to the whole
    reservation)."""
    allocation = hybrid_allocation(groups)
    rings = [ring_slots(g.window, max_model_len, max_model_len, True, RING_CHUNK_TOKENS)
             for g in allocation.groups if g.window is not None]
    num_full = len(allocation.groups) - len(rings)
    slots = num_full * max_model_len + sum(rings)
    reserve = (f"{num_full} full group(s) x {max_model_len} + {len(rings)} window group(s) x "
               f"{min(rings)} ring slots of {allocation.group_size} layers (chunks <= "
               f"{RING_CHUNK_TOKENS})")
    return _grouped_fit("contiguous-rings", reserve, allocation, slots, budget)


def _hybrid_fit(groups: tuple[KVGroup, ...], mean_len: int, block: int,
                budget: int | None) -> StrategyFit:
    allocation = hybrid_allocation(groups)
    slots = sequence_slots(mean_len, block, allocation)
    windows = sorted({g.window for g in allocation.groups if g.window is not None})
    num_full = sum(1 for g in allocation.groups if g.window is None)
    num_window = len(allocation.groups) - num_full
    window_slots = min(-(-mean_len // block), -(-windows[0] // block) + 1) * block
    reserve = (f"{num_full} full group(s) x {-(-mean_len // block) * block} + {num_window} "
               f"window group(s) x {window_slots} slots of {allocation.group_size} layers")
    return _grouped_fit(
        "hybrid", reserve, allocation, slots, budget, block_size=block,
        blocks_per_request=slots // block,
        num_blocks=_capacity(budget, allocation.slot_bytes, block))


def _grouped_fit(strategy: str, reserve: str, allocation: HybridAllocation, slots: int,
                 budget: int | None, **blocks: Any) -> StrategyFit:
    """A fit in equal-page allocation-group slots: `slots` a request, the reserve text with
    the groups' padding layers named."""
    if allocation.padding_layers:
        reserve += f"; {allocation.padding_layers} padding layer(s)"
    return StrategyFit(strategy, reserve, slots, slots * allocation.slot_bytes,
                       _capacity(budget, allocation.slot_bytes, slots), **blocks)


def _capacity(budget: int | None, bytes_per_token: int, tokens: int = 1) -> int | None:
    """`kv_capacity`, None without a budget."""
    return None if budget is None else kv_capacity(budget, bytes_per_token, tokens)


def _comparison(
    compare: tuple[Any, Any] | None, budget: int | None, per_token: int
) -> UtilizationComparison | None:
    if compare is None:
        return None
    if budget is None:
        raise KvbenchInputError("comparing KV utilizations needs a KV budget: give --kv-memory "
                                "or --gpu-memory")
    return compare_kv_utilization(budget, *compare, per_token)


def format_estimate(est: KVEstimate) -> str:
    """The plain-text table of `kvbench estimate`: exact bytes, binary units, one formula a row."""
    rows: list[tuple[str, str, str, str]] = []  # label, exact, binary, formula

    def add(label: str, value: int | str, formula: str = "") -> None:
        """A byte count shows exact and in binary units; a text shows as it is."""
        if isinstance(value, int):
            rows.append((label, f"{value:,}", format_bytes(value), formula))
        else:
            rows.append((label, value, "", formula))

    per_token = " + ".join(group.formula() for group in est.kv_groups)
    add("KV per token", est.kv_bytes_per_token, f"{per_token} ({est.kv_cache_dtype})")
    tokens = f"{est.tokens_per_request:,} tokens"
    if est.block_size and est.tokens_per_request != est.context:
        tokens += f" ({est.context:,} rounded up to blocks of {est.block_size})"
    pages = est.state_pages
    add("KV per request", est.kv_bytes_per_request, f"per token x {tokens}" + (
        f" + state per sequence {pages.state_bytes_per_sequence:,} B" if pages else ""))
    add("KV total", est.kv_bytes_total,
        f"per request x {_plural(est.concurrency, 'concurrent request')}")
    if est.vllm is not None:
        startup = est.vllm
        add("GPU memory", startup.stages[0].total,
            f"{startup.memory_source} ({startup.gpu or '--gpu-memory'})")
        tp = f", TP {est.tensor_parallel_size}" if est.tensor_parallel_size > 1 else ""
        add("weights per GPU", est.weights_bytes_per_gpu,
            "--weights-memory" if est.weights_source == "given"
            else f"as vLLM loads them ({est.vllm_quantization}){tp}")
        budget_formula = (f"vLLM's pool: {startup.pool.tokens:,} tokens x per token"
                          if startup.pool else "")
        if startup.pool and est.state_pages is not None:
            budget_formula = (f"vLLM's pool: {startup.pool.num_blocks:,} blocks x "
                              f"{startup.pool.block_bytes:,} B (attention and state)")
    elif est.kv_budget_source == "gpu":
        add("GPU memory", est.gpu_memory_bytes, "--gpu-memory")
        weights_formula = "--weights-memory"
        if est.weights_source == "computed":
            weights_formula = (f"{est.num_parameters:,} parameters x "
                               f"{DTYPE_BYTES[est.dtype or 'bf16']} B ({est.dtype})")
            if est.active_parameters != est.num_parameters:
                weights_formula += f"; {est.active_parameters:,} active per token"
        add("weights", est.weights_bytes, weights_formula)
        if est.tensor_parallel_size > 1 and est.weights_bytes_per_gpu is not None:
            add("weights per GPU", est.weights_bytes_per_gpu,
                f"sharded / {est.tensor_parallel_size} + replicated (norms, MLA down-projections)")
        budget_formula = (f"floor(GPU memory x {_fmt_fraction(est.gpu_memory_utilization)}) - "
                          "weights" + (" per GPU" if est.tensor_parallel_size > 1 else ""))
    else:
        budget_formula = "--kv-memory"
    if est.kv_budget_bytes is not None:
        add("KV budget", est.kv_budget_bytes, budget_formula)
        capacity, concurrency = "floor(budget / per token)", "floor(budget / per request)"
        if pages is not None:
            capacity = (f"floor(budget / block / {pages.attention_groups} attention group(s)) "
                        f"x {pages.block_size} (no state held)")
            concurrency = (f"floor(budget / block / ({pages.attention_groups} x cdiv(tokens, "
                           f"{pages.block_size}) + {pages.state_groups} state blocks)), as vLLM")
        add("KV capacity", f"{est.kv_capacity_tokens:,} tokens", capacity)
        add("max concurrency", _plural(est.max_concurrency, "request"), concurrency)
        mha = est.mha_equivalent
        if mha is not None and mha.max_concurrency is not None:
            add("MHA-equivalent KV", mha.kv_bytes_per_token,
                "per token if each head cached K (qk_nope + qk_rope) and V (v_head_dim)")
            add("MHA-equivalent", _plural(mha.max_concurrency, "request"),
                f"floor(budget / (MHA per token x {est.tokens_per_request:,}))")
        if est.fits:
            add("total vs budget", "fits", "total <= budget")
        else:
            over = est.kv_bytes_total - est.kv_budget_bytes
            add("total vs budget", "too big",
                f"total > budget by {over:,} B ({format_bytes(over)})")

    lines = [f"KV-cache estimate: {est.model or 'explicit shapes'}, KV {est.kv_cache_dtype}, "
             f"{est.context:,}-token context, concurrency {est.concurrency:,}", ""]
    lines += text_table(("quantity", "bytes", "binary", "formula"), rows, right=(1,))
    if pages is not None:
        lines += ["", "state-space hybrid: recurrent state and attention KV in one pool of "
                  "equal pages (vLLM's hybrid allocator):"]
        lines += text_table(("quantity", "value", "formula"), state_pages_rows(pages),
                            right=(1,))
    if any(size.window is not None for size in est.kv_group_sizes):
        lines += ["", f"KV per sequence per layer group at {est.context:,} tokens (a window "
                  "layer needs its last W tokens only; paged and prefix hold the whole context "
                  "in every layer, contiguous a ring of about W + one step's tokens per window "
                  "group):"]
        lines += text_table(GROUP_TABLE_HEADER, group_rows(est.kv_group_sizes),
                            right=(1, 2, 3, 4))

    if est.kv_budget_bytes is not None:
        names = {"contiguous": "contiguous (reserve max)",
                 "contiguous-rings": "contiguous (max, window rings)"}
        srows = [(names.get(fit.strategy) or (fit.strategy if fit.block_size is None else
                                              f"{fit.strategy} (block {fit.block_size})"),
                  f"{fit.tokens_per_request:,}", f"{fit.bytes_per_request:,}",
                  format_bytes(fit.bytes_per_request), f"{fit.max_concurrency:,}", fit.reserve)
                 for fit in est.strategies.values()]
        lines += ["", "max concurrency per strategy (same budget):"]
        lines += text_table(("strategy", "tokens/request", "bytes/request", "binary",
                             "max concurrency", "reserves"), srows, right=(1, 2, 4))

    if est.vllm is not None:
        lines += ["", format_vllm_startup(est.vllm)]

    comp = est.kv_utilization_comparison
    if comp is not None:
        lines += ["", f"effective capacity of {format_bytes(comp.kv_bytes)} of KV (KV "
                      "utilization = token bytes / held bytes):"]
        crows = [(f"{float(u) * 100:g}%", f"{eff:,}", format_bytes(eff),
                  f"{tokens:,}" if tokens is not None else "n/a")
                 for u, eff, tokens in (
                     (comp.utilization_from, comp.effective_bytes_from, comp.tokens_from),
                     (comp.utilization_to, comp.effective_bytes_to, comp.tokens_to))]
        lines += text_table(("KV utilization", "token bytes", "binary", "tokens"), crows,
                            right=(1, 3))
        lines.append(f"capacity gain: {_fmt_fraction(comp.utilization_to)} / "
                     f"{_fmt_fraction(comp.utilization_from)} = "
                     f"{float(comp.capacity_gain):.4g}x more KV state in the same memory")
    return "\n".join(lines)


def text_table(
    header: tuple[str, ...], rows: list[tuple[str, ...]], right: tuple[int, ...] = ()
) -> list[str]:
    """A plain table's lines: columns as wide as their widest cell, `right` ones right-aligned."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(header), line(tuple("-" * w for w in widths)), *(line(r) for r in rows)]


def _positive(**values: int) -> None:
    for name, value in values.items():
        if value <= 0:
            option = "--" + name.replace("num_", "").replace("_", "-")
            raise KvbenchInputError(f"{option} must be a positive integer, got {value}")


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _fmt_fraction(value: Fraction) -> str:
    return f"{float(value):g}"
