"""`SimulatedExecutors`: the executor factory of `kvbench simulate`: a GPU preset, no weights.

The same wiring, options, strategy, policy and checks as for the model, with the model's shape
from its preset or `config.json` and a `SimulatedExecutor` on a `SimulatedClock`. The KV budget
is the one vLLM's start-up would leave on that GPU at the same flags, or `--kv-memory`
(docs/simulator.md, KV budget: vLLM's start-up); `kv_budget_terms` are its terms.

Nothing here imports torch (docs/design.md): dtypes are torch's names and their sizes, the
device is `SIMULATED_DEVICE` (nothing is allocated anywhere).
"""

from __future__ import annotations

from kvbench.build.engine_build import BuildContext, EnginePlan, EngineShape, ExecutorFactory
from kvbench.build.vllm_flags import vllm_flags
from kvbench.config import EngineConfig
from kvbench.core.executor import DeviceKind
from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.dtype_names import element_bytes, kv_cache_dtype_name, model_dtype_name
from kvbench.models.sizes import DTYPE_BYTES, weights_dtype
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.gpus import DEFAULT_GPU, GPUSpec
from kvbench.simulator.simulated_executor import (
    SIMULATED_DEVICE,
    SimulatedClock,
    SimulatedExecutor,
)
from kvbench.simulator.step_time import StepTimeModel
from kvbench.sizing.kv_budget import check_kv_memory
from kvbench.sizing.vllm_startup import VllmStartup, vllm_startup

SIMULATED_BACKEND = "simulated"


class SimulatedExecutors(ExecutorFactory):
    """The step-time model of `gpu`; the engine's clock is the simulated one (`engine.clock`),
    its backend "simulated" and the GPU spec `engine.executor.gpu`. Sampling is greedy whatever
    `config.temperature` says: token ids never matter with workload-fixed output lengths.
    With `config.tensor_parallel_size` N > 1 the KV budget is the group's (N GPUs' KV
    shards of the same tokens) and the step time includes the all-reduces of the group
    (docs/simulator.md).
    """

    def __init__(self, gpu: str | GPUSpec = DEFAULT_GPU, start_s: float = 0.0) -> None:
        self.gpu = gpu
        self.start_s = start_s

    def load(self, shape: EngineShape, context: BuildContext):
        get_gpu(self.gpu)  # an unknown preset fails before anything else
        # No thread pinning: a simulated step runs no torch op.
        return SIMULATED_DEVICE, None

    def kv_dtype(self, config: EngineConfig) -> str:
        return kv_cache_dtype_name(config)

    @staticmethod
    def _weight_bytes_per_param(config: EngineConfig, model_config) -> int:
        """`--dtype`'s bytes, or 1 for fp8 weights (a checkpoint's, `weights_dtype`, or
        `--quantization fp8`)."""
        if config.quantization is not None:
            return 1
        return DTYPE_BYTES[weights_dtype(model_config, model_dtype_name(config.dtype))]

    def startup(self, config: EngineConfig, model_config: ModelConfig,
                max_batched_tokens: int) -> VllmStartup:
        """vLLM's start-up on this GPU at `config`'s flags (each GPU of the group)."""
        spec = get_gpu(self.gpu)
        flags = vllm_flags(config, max_batched_tokens, model_dtype_name(config.dtype))
        return vllm_startup(model_config, spec.reported_memory_bytes, flags,
                            gpu_name=spec.description)

    def kv_budget(self, config, device, model, model_config, max_batched_tokens):
        if config.kv_memory is not None:
            spec = get_gpu(self.gpu)
            return check_kv_memory(int(config.kv_memory), spec.reported_memory_bytes,
                                   spec.name, config.tensor_parallel_size), None
        startup = self.startup(config, model_config, max_batched_tokens)
        if startup.available <= 0:
            raise KvbenchInputError(f"on {get_gpu(self.gpu).name}: {startup.refusal}")
        return startup.available * config.tensor_parallel_size, startup.to_dict()

    def clock(self, context: BuildContext) -> SimulatedClock:
        return SimulatedClock(self.start_s)

    def executor(self, plan: EnginePlan, clock) -> SimulatedExecutor:
        config, model_config = plan.shape.config, plan.shape.model_config
        cost_model = StepTimeModel(model_config, get_gpu(self.gpu),
                                   self._weight_bytes_per_param(config, model_config),
                                   element_bytes(plan.kv_dtype), config.tensor_parallel_size,
                                   element_bytes(model_dtype_name(config.dtype)))
        return SimulatedExecutor(cost_model, clock,
                                 overlap_cpu_overhead=bool(config.async_scheduling))

    def backend(self, config: EngineConfig, device: DeviceKind) -> str:
        return SIMULATED_BACKEND

    def temperature(self, config: EngineConfig) -> float:
        return 0.0

