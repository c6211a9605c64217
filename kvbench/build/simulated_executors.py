"""`SimulatedExecutors`: the executor factory of `kvbench simulate`: a GPU preset, no weights.

`build_engine(config, executor=SimulatedExecutors(gpu))` wires the same options, strategy,
policy and checks as for the model, with the model's shape from its preset or `config.json`
and a `SimulatedExecutor` on a `SimulatedClock` instead of the model.

The KV budget is `kvbench.sizing.kv_budget.kv_budget_bytes`, as vLLM's
`--gpu-memory-utilization` on a real GPU (docs/design.md), per GPU of the tensor-parallel
group (`kvbench.sizing.capacity.group_kv_capacity`):

    budget = floor(GPU memory x utilization) - weights - activations     (utilization 0.9)

or `--kv-memory` when given. Weights are parameters x bytes of `--dtype`; simulate's CLI
default is bfloat16 (`RunOptions`' `dtype`: `EngineConfig`'s float32 default is a CPU
default; float32 is simulated as TF32). The activation peak cannot be profiled without a GPU,
so it is estimated by `activation_bytes_estimate`.

Nothing here imports torch (docs/design.md): dtypes are torch's names and their sizes
(`kvbench.models.dtype_names`), the device is `SIMULATED_DEVICE`, a `DeviceKind("meta")`.
"""

from __future__ import annotations

from kvbench.build.engine_build import BuildContext, BuiltEngine, ExecutorFactory
from kvbench.config import EngineConfig
from kvbench.core.executor import DeviceKind
from kvbench.models.dtype_names import element_bytes, kv_cache_dtype_name, model_dtype_name
from kvbench.models.memory_check import activation_bytes_estimate, activation_flag
from kvbench.models.resolve_config import resolve_model_config
from kvbench.models.sizes import DTYPE_BYTES, weights_dtype
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.gpus import DEFAULT_GPU, GPUSpec
from kvbench.simulator.simulated_executor import (
    SIMULATED_DEVICE,
    SimulatedClock,
    SimulatedExecutor,
)
from kvbench.simulator.step_time import StepTimeModel
from kvbench.sizing.capacity import group_kv_capacity, weight_bytes_per_gpu

SIMULATED_BACKEND = "simulated"


class SimulatedExecutors(ExecutorFactory):
    """The step-time model of `gpu`; the engine's clock is the simulated one (`engine.clock`).

    `BuiltEngine.device` is `SIMULATED_DEVICE` (type `meta`: nothing is allocated anywhere),
    `kv_dtype` is torch's name of the KV dtype (no tensor exists) and `backend` is
    "simulated"; the GPU spec is `engine.executor.gpu`. Sampling is greedy whatever
    `config.temperature` says: token ids never matter with workload-fixed output lengths.
    With `config.tensor_parallel_size` N > 1 the KV budget is the group's (N GPUs' KV
    shards of the same tokens) and the step time includes the all-reduces of the group
    (docs/simulator.md).
    """

    def __init__(self, gpu: str | GPUSpec = DEFAULT_GPU, start_s: float = 0.0) -> None:
        self.gpu = gpu
        self.start_s = start_s

    def load(self, config: EngineConfig, context: BuildContext):
        get_gpu(self.gpu)  # an unknown preset fails before anything else
        # No thread pinning: a simulated step runs no torch op.
        return SIMULATED_DEVICE, None, resolve_model_config(config.model)

    def kv_dtype(self, config: EngineConfig) -> str:
        return kv_cache_dtype_name(config)

    @staticmethod
    def _weight_bytes_per_param(config: EngineConfig, model_config) -> int:
        """`--dtype`'s bytes, or 1 for a checkpoint of fp8 weights (`weights_dtype`)."""
        return DTYPE_BYTES[weights_dtype(model_config, model_dtype_name(config.dtype))]

    def kv_budget_bytes(self, config, device, model, model_config, max_batched_tokens):
        if config.kv_memory is not None:
            return int(config.kv_memory)
        per_param = self._weight_bytes_per_param(config, model_config)
        activations = activation_bytes_estimate(
            model_config, max_batched_tokens, config.max_num_seqs, per_param
        )
        spec = get_gpu(self.gpu)
        tp = config.tensor_parallel_size
        advice = {}
        if activations // tp > weight_bytes_per_gpu(model_config, tp, per_param):
            # The activations are the largest part: name the option that sized them.
            flag, value = activation_flag(model_config, max_batched_tokens,
                                          config.max_num_seqs, per_param)
            advice["advice"] = (f"use a smaller {flag} (the {value:,} given size most of the "
                                "activations), a larger --gpu or a higher "
                                "--tensor-parallel-size")
        elif per_param <= 2:  # already 16-bit weights: a smaller --dtype is no way out
            advice["advice"] = ("use a larger --gpu, a higher --tensor-parallel-size or a "
                                "smaller model")
        # Per GPU: a weight shard, activations of its head / column share (estimated as 1/N).
        group = group_kv_capacity(
            model_config, spec.memory_bytes, tp, config.gpu_memory_utilization, per_param,
            element_bytes(kv_cache_dtype_name(config)), activations // tp, gpu_name=spec.name,
            **advice,
        )
        return group.kv_budget_bytes

    def clock(self, context: BuildContext) -> SimulatedClock:
        return SimulatedClock(self.start_s)

    def executor(self, config, model, model_config, device, num_slots, kv_dtype, clock):
        cost_model = StepTimeModel(model_config, get_gpu(self.gpu),
                                   self._weight_bytes_per_param(config, model_config),
                                   element_bytes(kv_dtype), config.tensor_parallel_size)
        return SimulatedExecutor(cost_model, clock)

    def backend(self, config: EngineConfig, device: DeviceKind) -> str:
        return SIMULATED_BACKEND

    def temperature(self, config: EngineConfig) -> float:
        return 0.0


def build_simulated_engine(
    config: EngineConfig, gpu: str | GPUSpec, start_s: float = 0.0
) -> BuiltEngine:
    """The simulated engine of `config` on `gpu` (`kvbench.build.engines.build_engine` with
    `SimulatedExecutors(gpu, start_s)`)."""
    return SimulatedExecutors(gpu, start_s).build(config, BuildContext())


__all__ = [
    "SimulatedExecutors",
    "activation_bytes_estimate",
    "build_simulated_engine",
]
