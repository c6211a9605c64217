"""`build_simulated_engine`: `build_engine` for `kvbench simulate`: a GPU preset, no weights.

Mirrors `kvbench.execution.build.build_engine` (same options, same strategy and policy
construction, same checks) with the model's shape from its preset or `config.json` and a
`SimulatedExecutor` on a `SimulatedClock` instead of the model.

The KV budget, as vLLM's `--gpu-memory-utilization` on a real GPU (DESIGN.md):

    budget = floor(GPU memory x utilization) - weights - activations     (utilization 0.9)

or `--kv-memory` when given. Weights are parameters x bytes of `--dtype`; simulate's CLI
default is `SIMULATE_DEFAULT_DTYPE` (bfloat16: `EngineConfig`'s float32 default is a CPU
default; float32 is simulated as TF32). The activation peak cannot be profiled without a GPU,
so it is estimated by `activation_bytes_estimate`.
"""

from __future__ import annotations

import math

import torch

from kvbench.config import EngineConfig
from kvbench.core.engine import Engine
from kvbench.errors import KvbenchInputError
from kvbench.execution.build import (
    BuiltEngine,
    arena_slots,
    effective_config,
    resolve_lengths,
    strategy_for,
)
from kvbench.execution.gpus import GPUSpec, get_gpu
from kvbench.execution.kv_budget import kv_cache_torch_dtype, kv_element_bytes
from kvbench.execution.kv_capacity import group_kv_capacity
from kvbench.execution.simulated_executor import SimulatedClock, SimulatedExecutor
from kvbench.execution.step_time import StepTimeModel
from kvbench.models.config import ModelConfig
from kvbench.models.loader import parse_dtype, resolve_model_config
from kvbench.scheduling import SchedulerLimits, make_policy
from kvbench.units import format_bytes

SIMULATE_DEFAULT_DTYPE = "bfloat16"
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default
SIMULATED_BACKEND = "simulated"
LOGITS_BYTES = 4  # the sampler's float32 logits


def activation_bytes_estimate(
    model: ModelConfig, max_num_batched_tokens: int, max_num_seqs: int, element_bytes: int
) -> int:
    """Estimated peak activation memory of one full-size prefill (what vLLM measures).

    The widest point of a decoder layer for `max_num_batched_tokens` tokens: the residual
    stream and its normed copy (2 x hidden), q, k and v (q_dim + 2 x kv_dim), and the MLP's
    gate, up and their product (3 x intermediate), in the model dtype; plus float32 logits for
    `max_num_seqs` sampled rows. Allocator slack, CUDA graphs and the CUDA context are not
    counted (`--gpu-memory-utilization` < 1 leaves room for them). Unvalidated.
    """
    q_dim = model.num_heads * model.head_dim
    kv_dim = model.num_kv_heads * model.head_dim
    per_token = 2 * model.hidden_size + q_dim + 2 * kv_dim + 3 * model.intermediate_size
    logits = max_num_seqs * model.vocab_size * LOGITS_BYTES
    return max_num_batched_tokens * per_token * element_bytes + logits


def simulated_kv_budget_bytes(
    config: EngineConfig,
    gpu: GPUSpec,
    weights_bytes: int,
    activation_bytes: int,
) -> int:
    if config.kv_memory is not None:
        return int(config.kv_memory)
    fraction = config.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    usable = math.floor(gpu.memory_bytes * fraction)
    budget = usable - weights_bytes - activation_bytes
    if budget <= 0:
        raise KvbenchInputError(
            f"--gpu-memory-utilization {fraction} leaves no KV memory on {gpu.name}: "
            f"{format_bytes(usable)} usable, weights {format_bytes(weights_bytes)} "
            f"({config.dtype}) and activations ~{format_bytes(activation_bytes)}; "
            "use a larger --gpu, a smaller model or --dtype bfloat16"
        )
    return budget


def build_simulated_engine(
    config: EngineConfig,
    gpu: str | GPUSpec,
    start_s: float = 0.0,
    tensor_parallel_size: int = 1,
) -> BuiltEngine:
    """An engine whose executor is the cost model of `gpu`; its clock is `engine.clock`.

    `BuiltEngine.device` is `meta` (nothing is allocated anywhere) and `backend` is
    "simulated"; the GPU spec is `engine.executor.gpu`. Sampling is greedy whatever
    `config.temperature` says: token ids never matter with workload-fixed output lengths.
    """
    # Nothing here is worth a second thread; torch's pool would only contend with the engine.
    torch.set_num_threads(1)
    config = effective_config(config)
    spec = get_gpu(gpu)
    model_config = resolve_model_config(config.model)
    dtype = parse_dtype(config.dtype)
    weight_bytes_per_param = torch.empty((), dtype=dtype).element_size()
    max_model_len, max_batched = resolve_lengths(config, model_config)
    kv_dtype = kv_cache_torch_dtype(config, dtype)
    kv_elem = kv_element_bytes(kv_dtype)
    bytes_per_slot = model_config.kv_bytes_per_token(kv_elem)
    if tensor_parallel_size == 1:
        weights = model_config.num_parameters() * weight_bytes_per_param
        activations = activation_bytes_estimate(
            model_config, max_batched, config.max_num_seqs, weight_bytes_per_param
        )
        budget = simulated_kv_budget_bytes(config, spec, weights, activations)
    else:
        # Per GPU: a weight shard, activations of its head / column share (estimated as 1/N).
        activations = activation_bytes_estimate(
            model_config, max_batched, config.max_num_seqs, weight_bytes_per_param
        ) // tensor_parallel_size
        group = group_kv_capacity(
            model_config, spec.memory_bytes, tensor_parallel_size,
            config.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
            weight_bytes_per_param, kv_elem, activations,
        )
        budget = int(config.kv_memory) if config.kv_memory is not None else group.kv_budget_bytes
    strategy = strategy_for(config, arena_slots(budget, bytes_per_slot), max_model_len)
    clock = SimulatedClock(start_s)
    cost_model = StepTimeModel(
        model_config, spec, weight_bytes_per_param, kv_elem, tensor_parallel_size
    )
    executor = SimulatedExecutor(cost_model, clock)
    limits = SchedulerLimits(config.max_num_seqs, max_batched, config.chunked_prefill)
    policy = make_policy(config.batching, strategy, limits)
    engine = Engine(
        strategy,
        policy,
        executor,
        bytes_per_slot=bytes_per_slot,
        max_model_len=max_model_len,
        temperature=0.0,
        seed=config.seed,
        clock=clock,
    )
    return BuiltEngine(
        engine,
        model_config,
        torch.device("meta"),
        budget,
        kv_dtype,
        bytes_per_slot,
        SIMULATED_BACKEND,
        max_model_len,
    )


__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "SIMULATE_DEFAULT_DTYPE",
    "activation_bytes_estimate",
    "build_simulated_engine",
    "simulated_kv_budget_bytes",
]
